"""What the tests' HTTP clients share."""

# The Host a browser on this machine sends. A server bound to loopback answers only requests addressed to a
# loopback name (DNS rebinding, web/origin.py), and Starlette's TestClient would otherwise send "testserver".
LOOPBACK = "http://127.0.0.1:7860"
