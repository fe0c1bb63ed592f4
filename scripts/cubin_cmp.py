#!/usr/bin/env python3
"""cubin_cmp.py - compare the device code of two sets of nvcc objects, kernel
by kernel, without cuobjdump (this machine's CUDA toolkit has only nvcc):
for a pure refactor of .cu files (code moved between files or into shared
headers), the SASS must come out unchanged.

  scripts/cubin_cmp.py BEFORE.o[,BEFORE2.o...] AFTER.o[,AFTER2.o...] [REGEX]

Reads the sm_XX cubins (ELF, EM_CUDA) embedded uncompressed in each
object's fatbin and, per kernel whose name matches REGEX (default: all),
compares
  - text: the bytes of .text.<kernel> (the SASS; any change of code,
    scheduling or register allocation shows here),
  - regs / frame / stack: EIATTR_REGCOUNT, _FRAME_SIZE, _MIN_STACK_SIZE of
    the cubin's .nv.info,
  - smem: the size of .nv.shared.<kernel> (static shared memory, with the
    reserved 1 KiB of sm_90),
  - const0: the size of the kernel's parameter constant bank,
  - info: the bytes of .nv.info.<kernel>, except for symbol-table indices
    (they change whenever a cubin gains or loses symbols).
Prints one line per kernel that differs and a summary; exit status 0 when
every kernel is in both sets and the same in all fields. CUBIN_CMP_RENAME="REGEX=>REPL" renames the after kernels first
(re.sub), for a change that adds a template parameter or trailing kernel
parameters (their text must then match; const0 and info differ by the
parameters). Objects built in
separate compilations (device functions named $__internal_N_ per cubin)
are handled: each kernel's .text holds its own copies of such callees.
"""
import os
import re
import struct
import sys


def cubins(path):
    """The CUDA ELF images inside an object file (an nvcc .o embeds them in
    its .nv_fatbin section; this assumes an uncompressed fatbin)."""
    data = open(path, "rb").read()
    out = []
    i = data.find(b"\x7fELF", 1)
    while i > 0:
        if data[i + 4] == 2 and struct.unpack_from("<H", data, i + 0x12)[0] == 190:  # ELF64, EM_CUDA
            shoff, = struct.unpack_from("<Q", data, i + 0x28)
            shentsize, shnum, _ = struct.unpack_from("<HHH", data, i + 0x3A)
            out.append(data[i:i + shoff + shentsize * shnum])
        i = data.find(b"\x7fELF", i + 1)
    return out


def cstr(elf, off):
    return elf[off:elf.index(b"\0", off)].decode()


def parse(elf):
    """{kernel: fields} of one cubin."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    sh = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    shstr = sh[shstrndx][4]
    sec = {}
    for name, typ, _, _, off, size, _, _, _, _ in sh:
        sec[cstr(elf, shstr + name)] = (elf[off:off + size] if typ != 8 else b"", size)  # 8: NOBITS
    symtab, strtab = [s for s in sh if cstr(elf, shstr + s[0]) in (".symtab", ".strtab")][:2]
    if cstr(elf, shstr + symtab[0]) != ".symtab":
        symtab, strtab = strtab, symtab
    syms = [cstr(elf, strtab[4] + struct.unpack_from("<I", elf, symtab[4] + k * 24)[0])
            for k in range(symtab[5] // 24)]
    res = {}
    info = sec.get(".nv.info", (b"", 0))[0]
    i = 0
    while i + 4 <= len(info):  # records: format, attribute, then by format
        fmt, attr = info[i], info[i + 1]
        if fmt == 4:  # EIFMT_SVAL: u16 size, data
            size, = struct.unpack_from("<H", info, i + 2)
            if attr in (0x2F, 0x11, 0x12) and size == 8:
                s, v = struct.unpack_from("<II", info, i + 4)
                res.setdefault(syms[s], {})[{0x2F: "regs", 0x11: "frame", 0x12: "stack"}[attr]] = v
            i += 4 + size
        else:  # EIFMT_NVAL / BVAL / HVAL: the value in the record's last two bytes
            i += 4
    out = {}
    for name, (body, size) in sec.items():
        if not name.startswith(".text."):
            continue
        k = name[6:]
        kinfo = bytearray(sec.get(".nv.info." + k, (b"", 0))[0])
        j = 0
        while j + 4 <= len(kinfo):  # blank the symbol index of EIATTR_PARAM_CBANK (0x0a)
            fmt, attr = kinfo[j], kinfo[j + 1]
            if fmt != 4:
                j += 4
                continue
            size, = struct.unpack_from("<H", kinfo, j + 2)
            if attr == 0x0A and size >= 4:
                kinfo[j + 4:j + 8] = b"\0\0\0\0"
            j += 4 + size
        r = res.get(k, {})
        out[k] = dict(text=body, regs=r.get("regs"), frame=r.get("frame"), stack=r.get("stack"),
                      smem=sec.get(".nv.shared." + k, (b"", 0))[1],
                      const0=sec.get(".nv.constant0." + k, (b"", 0))[1], info=bytes(kinfo))
    return out


def kernels(paths, rx):
    out = {}
    for p in paths.split(","):
        for elf in cubins(p):
            for k, v in parse(elf).items():
                if k.startswith("$__internal") or not re.search(rx, k):
                    continue
                if k in out:
                    sys.exit("cubin_cmp: kernel %s twice in %s" % (k, paths))
                out[k] = v
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rx = sys.argv[3] if len(sys.argv) > 3 else ""
    a, b = kernels(sys.argv[1], rx), kernels(sys.argv[2], rx)
    ren = os.environ.get("CUBIN_CMP_RENAME", "")  # "REGEX=>REPL": applied to the after names
    if "=>" in ren:
        pat, rep = ren.split("=>", 1)
        b = {re.sub(pat, rep, k): v for k, v in b.items()}
    bad = 0
    for k in sorted(set(a) - set(b)):
        print("only before:", k)
        bad += 1
    for k in sorted(set(b) - set(a)):
        print("only after: ", k)
        bad += 1
    same = 0
    for k in sorted(set(a) & set(b)):
        d = [f for f in a[k] if a[k][f] != b[k][f]]
        if not d:
            same += 1
            continue
        bad += 1
        show = lambda f, v: len(v) if f in ("text", "info") else v
        print("DIFF %s: %s" % (k, ", ".join("%s %s -> %s" % (f, show(f, a[k][f]), show(f, b[k][f])) for f in d)))
    print("kernels: %d before, %d after, %d identical (text, regs, frame, stack, smem, const0, info)"
          % (len(a), len(b), same))
    for k in sorted(b) if "-v" in sys.argv[4:] else []:
        print("  %-72s regs %3s frame %3s smem %6d text %7d B" % (k[:72], b[k]["regs"], b[k]["frame"],
                                                                  b[k]["smem"], len(b[k]["text"])))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
