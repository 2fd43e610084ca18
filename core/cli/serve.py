"""``rammer serve``: a compiled model behind Ray Serve, speaking KServe v2.

Needs the serve extra (``pip install -e ".[serve]"`` in the checkout)."""

from __future__ import annotations

import argparse
import signal
import threading

from ..errors import RammerError
from ..frontend.source import read_model
from .common import add_backend_arg, add_model_args, model_source, parse_shapes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model over HTTP (KServe v2 protocol) with Ray Serve replicas",
                       description="Serve a compiled model behind Ray Serve. Each replica is a process with its own "
                                   "vEUs; with --batch B the model is compiled for batch B (dim 0) and concurrent "
                                   "requests are gathered and padded to it. Clients speak the KServe v2 / Triton "
                                   "HTTP protocol. See docs/serving.md.")
    add_model_args(p)
    add_backend_arg(p)
    p.add_argument("--replicas", type=int, default=1, help="replica processes (default 1)")
    p.add_argument("--veus", type=int, default=1, help="vEUs (cores) per replica (default 1)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="longest wait to fill a batch (default 5 ms)")
    p.add_argument("--name", default=None, help="model name in the URLs (default: the model's file or zoo name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.add_argument("--address", default=None, help="an existing Ray cluster (e.g. 'auto' on a cluster node); "
                                                   "default: a local Ray on 127.0.0.1")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.replicas < 1 or args.veus < 1:
        raise RammerError("--replicas and --veus must be at least 1")
    try:
        from ..serve.deployment import ServeConfig, start
        from ..serve.deployment import stop as stop_serving
    except ImportError as exc:
        raise RammerError(f"rammer serve needs Ray Serve ({exc.name} is not installed): "
                          f"pip install -e \".[serve]\" in the rammer checkout") from None

    # --batch B: the model is compiled for batch B (a zoo model is built at it) and concurrent
    # requests are gathered into it.
    source, label = model_source(args)
    proto, _ = read_model(source)
    name = args.name or label.rsplit(".", 1)[0]
    config = ServeConfig(model=proto.SerializeToString(), name=name, backend=args.backend, veus=args.veus,
                         replicas=args.replicas, batch=args.batch, max_wait_ms=args.max_wait_ms,
                         input_shapes=parse_shapes(args.shape) or None)
    url = start(config, host=args.host, port=args.port, address=args.address)
    print(f"serving '{name}' with {args.replicas} replica(s) x {args.veus} vEU(s) at {url} (Ctrl-C stops)",
          flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    stop_serving(shutdown_ray=True)
    return 0
