"""`vllm serve` HTTP features: CORS (vLLM's --allowed-origins, default "*";
preflight answered before the API-key check) and HTTPS through
libmicrohttpd (--ssl-keyfile / --ssl-certfile) with a self-signed
certificate made by `openssl req` (skipped when openssl is missing)."""
import http.client
import json
import shutil
import ssl
import subprocess

import pytest

openai = pytest.importorskip("openai")

from test_server import MODEL_NAME, Server  # noqa: E402  (same directory)


def _raw(conn_factory, method, path, headers=None, body=None):
    c = conn_factory()
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def test_cors_default_any_origin(vllm_bin):
    s = Server(vllm_bin, ["--api-key", "k"])
    try:
        conn = lambda: http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)  # noqa: E731
        st, h, body = _raw(conn, "OPTIONS", "/v1/chat/completions",
                           {"Origin": "http://a.example", "Access-Control-Request-Method": "POST",
                            "Access-Control-Request-Headers": "authorization,content-type"})
        # Preflight: 200 without the API key, methods and requested headers allowed.
        assert st == 200 and h["access-control-allow-origin"] == "*"
        assert "POST" in h["access-control-allow-methods"]
        assert h["access-control-allow-headers"] == "authorization,content-type"
        st, h, _ = _raw(conn, "GET", "/v1/models", {"Origin": "http://a.example", "Authorization": "Bearer k"})
        assert st == 200 and h["access-control-allow-origin"] == "*"
        st, h, _ = _raw(conn, "GET", "/v1/models", {"Origin": "http://a.example"})
        assert st == 401 and h["access-control-allow-origin"] == "*"  # errors carry CORS too
        st, h, _ = _raw(conn, "GET", "/health")
        assert st == 200 and "access-control-allow-origin" not in h  # no Origin, no CORS headers
    finally:
        s.stop()
    assert s.proc.returncode == 0


def test_cors_allowed_methods_and_headers(vllm_bin):
    """--allowed-methods / --allowed-headers (vLLM's flags, Starlette's rules):
    the preflight lists the methods as given and the headers as the four
    CORS-safelisted ones plus the given ones, sorted; a method or header
    outside them (headers compared case-insensitively) gets 400 naming what
    failed; actual requests are not filtered by method."""
    s = Server(vllm_bin, ["--allowed-origins", "http://good.example", "--allowed-methods", '["GET", "POST"]',
                          "--allowed-headers", "X-Custom, Authorization"])
    try:
        conn = lambda: http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)  # noqa: E731

        def pre(origin, method, headers=None):
            h = {"Origin": origin, "Access-Control-Request-Method": method}
            if headers is not None:
                h["Access-Control-Request-Headers"] = headers
            return _raw(conn, "OPTIONS", "/v1/completions", h)

        st, h, body = pre("http://good.example", "POST", "content-type, x-custom,AUTHORIZATION")
        assert (st, body) == (200, "OK")
        assert h["access-control-allow-methods"] == "GET, POST"
        assert h["access-control-allow-headers"] == \
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type, X-Custom"
        assert h["access-control-allow-origin"] == "http://good.example"
        assert (pre("http://good.example", "PUT")[0], pre("http://good.example", "PUT")[2]) == \
            (400, "Disallowed CORS method")
        assert pre("http://good.example", "POST", "x-other")[2] == "Disallowed CORS headers"
        assert pre("http://good.example", "POST", "x-custom,")[2] == "Disallowed CORS headers"  # "" is no header
        st, h, body = pre("http://evil.example", "DELETE", "x-other")
        assert (st, body) == (400, "Disallowed CORS origin, method, headers")
        assert "access-control-allow-origin" not in h
        st, _, _ = _raw(conn, "GET", "/health", {"Origin": "http://good.example"})
        assert st == 200
    finally:
        s.stop()
    assert s.proc.returncode == 0
    with pytest.raises(RuntimeError, match="allowed-methods"):
        Server(vllm_bin, ["--allowed-methods", '["GET", 3]'])


def test_https_and_allowed_origins(vllm_bin, tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    # Both files or neither; a bad PEM is refused at start-up.
    for extra in (["--ssl-keyfile", str(key)], ["--ssl-keyfile", str(cert), "--ssl-certfile", str(cert)]):
        with pytest.raises(RuntimeError, match="ssl|HTTPS"):
            Server(vllm_bin, extra)
    ctx = ssl.create_default_context(cafile=str(cert))
    s = _https_server(vllm_bin, key, cert, ctx, ["--allowed-origins", '["http://good.example"]'])
    try:
        conn = lambda: http.client.HTTPSConnection("127.0.0.1", s.port, context=ctx, timeout=60)  # noqa: E731
        st, h, _ = _raw(conn, "GET", "/v1/models", {"Origin": "http://good.example"})
        assert st == 200 and h["access-control-allow-origin"] == "http://good.example" and h["vary"] == "Origin"
        st, h, _ = _raw(conn, "GET", "/v1/models", {"Origin": "http://evil.example"})
        assert st == 200 and "access-control-allow-origin" not in h
        st, h, body = _raw(conn, "OPTIONS", "/v1/completions",
                           {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert st == 400 and "Disallowed CORS origin" in body
        # The openai client over TLS: a streamed completion and a JSON one agree.
        c = openai.OpenAI(base_url=f"https://127.0.0.1:{s.port}/v1", api_key="x", max_retries=0,
                          http_client=openai.DefaultHttpxClient(verify=ctx, timeout=120))
        r = c.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=5, temperature=0)
        text = "".join(x.choices[0].text for x in c.completions.create(
            model=MODEL_NAME, prompt="Once upon a time", max_tokens=5, temperature=0, stream=True) if x.choices)
        assert text == r.choices[0].text and r.usage.completion_tokens == 5
        # Plain HTTP on the HTTPS port gets no answer.
        with pytest.raises((OSError, http.client.HTTPException)):
            _raw(lambda: http.client.HTTPConnection("127.0.0.1", s.port, timeout=10), "GET", "/health")
    finally:
        s.stop()
    assert s.proc.returncode == 0


class _HttpsServer(Server):
    def get(self, path):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()


def _https_server(vllm_bin, key, cert, ctx, extra):
    cls = type("S", (_HttpsServer,), {"ctx": ctx})
    return cls(vllm_bin, ["--ssl-keyfile", str(key), "--ssl-certfile", str(cert), *extra])


def test_engine_flags_async_and_tensor_parallel(vllm_bin):
    """--async-scheduling gives the same greedy completions as the default
    sync engine; -tp 3 (SmolLM2: 9 heads, 3 KV heads) serves too, and a
    size that does not divide the heads stops start-up with a clear error."""
    prompts = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time"]

    def complete(extra):
        s = Server(vllm_bin, extra)
        try:
            c = openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0)
            return [c.completions.create(model=MODEL_NAME, prompt=p, max_tokens=12, temperature=0).choices[0].text
                    for p in prompts]
        finally:
            s.stop()

    sync = complete([])
    assert complete(["--async-scheduling"]) == sync
    tp = complete(["-tp", "3", "--kv-cache-dtype", "float32"])
    assert all(len(t) > 0 for t in tp)
    with pytest.raises(RuntimeError, match="must divide"):
        Server(vllm_bin, ["-tp", "2"])
