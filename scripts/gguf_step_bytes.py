#!/usr/bin/env python3
"""gguf_step_bytes.py FILE — bytes of weights one batch-1 decode step reads
from a GGUF model: every tensor's data except token_embd.weight, of which
one row is read (unless the model has no output.weight: then the embedding
is also the LM head and is read whole). Needs the `gguf` package."""
import sys

import gguf


def main():
    r = gguf.GGUFReader(sys.argv[1])
    names = {t.name for t in r.tensors}
    total = 0
    for t in r.tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            total += int(t.n_bytes) // int(t.shape[-1] if len(t.shape) > 1 else 1)  # one row
        else:
            total += int(t.n_bytes)
    print(total)


if __name__ == "__main__":
    main()
