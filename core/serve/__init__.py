"""Serving compiled models behind Ray Serve, speaking the KServe v2 inference protocol.

``kserve`` (the protocol's JSON codec) and ``batching`` (padding requests to
a compiled batch size) are plain Python; ``deployment`` builds the Ray Serve
application and needs the ``serve`` extra (``pip install -e ".[serve]"`` in the checkout).
See docs/serving.md.
"""
