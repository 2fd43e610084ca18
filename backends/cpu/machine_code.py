"""LLVM machine code for the cpu backend's micro-kernels: compiling a module for this CPU, its
on-disk cache, and building each module on first need.

The generators (:mod:`.ukernel`, :mod:`.ukernel_winograd`, :mod:`.ukernel_window`) write LLVM IR;
each declares its modules as :class:`MachineCode` and its numba intrinsics call their symbols
through :func:`call_codegen`, marked with :func:`uses` so that :func:`symbols_called` can tell
which modules a numba function needs.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import threading
from collections.abc import Callable, Iterable

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils

from rammer.atomic_file import atomic_write
from rammer.errors import RammerError


def _host_features() -> tuple[str, str, set[str]]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu = llvm.get_host_cpu_name()
    feats = llvm.get_host_cpu_features()
    enabled = {k for k, v in feats.items() if v}
    return cpu, feats.flatten(), enabled


#: The host CPU as LLVM names it, its feature string, and the set of its enabled features.
CPU_NAME, CPU_FEATURES, HOST_FEATURES = _host_features()

@functools.cache
def generator_source() -> str:
    """The source of the modules that generate the cached kernels' IR and compile it (part of the
    cache key), read once per process."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    # every generator module (ukernel*.py): a module missing here would keep its cached machine code
    # after its IR changed (the lda, int8 and gemv generators were added after this list was written)
    names = ["machine_code.py", *sorted(n for n in os.listdir(here) if n.startswith("ukernel") and n.endswith(".py"))]
    for name in names:
        with open(os.path.join(here, name), encoding="utf-8") as f:
            out.append(f.read())
    return "\n".join(out)


def object_cache_path(text: str) -> str | None:
    """Where the machine code of module ``text`` for this CPU is cached (beside numba's cache)."""
    import llvmlite
    from numba.core import config

    key = hashlib.sha256("\n".join((text, CPU_NAME, CPU_FEATURES, llvmlite.__version__)).encode()).hexdigest()[:24]
    folder = config.CACHE_DIR or os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    return os.path.join(folder, f"rammer-ukernel-{key}.o")


def read_checked_object(path: str) -> bytes | None:
    """The object code cached at ``path`` (written by :func:`write_checked_object`), or None when the
    file is missing, unreadable or damaged: it ends with the SHA-256 of the code, so a damaged file is
    compiled over, never loaded."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    if len(blob) > 32 and hashlib.sha256(blob[:-32]).digest() == blob[-32:]:
        return blob[:-32]
    return None


def write_checked_object(path: str, data: bytes) -> None:
    """Cache object code ``data`` at ``path`` with its SHA-256 appended, atomically (a concurrent
    reader sees the old file or the whole new one); a cache that cannot be written only costs a
    compile later."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_write(path, "cached machine code") as f:
            f.write(data + hashlib.sha256(data).digest())
    except (OSError, RammerError):
        pass


def compile_module(mod: ir.Module | Callable[[], ir.Module], cache: bool = False, key: str = "") -> object:
    """An MCJIT engine holding ``mod`` compiled for this CPU (keep it alive while its code is used).

    With ``cache``, the machine code is kept on disk and loaded instead of optimising and
    compiling again (about 0.3 s at every start of a process otherwise).  The entry is keyed
    by the module's text; or, when ``mod`` is a builder (a callable returning the module), by
    ``key`` and the source of the generator modules, so that a hit builds no IR at all (building,
    printing and parsing the module took 0.3 s of a fresh process's cached compile).  Either
    way the CPU and llvmlite's version are in the key.  A missing, unreadable or unwritable
    cache only costs the compile."""
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=CPU_NAME, features=CPU_FEATURES, opt=3)
    text = "" if callable(mod) else str(mod)
    path = (object_cache_path(generator_source() + key if callable(mod) else text) if cache else None)
    cached = read_checked_object(path) if path is not None else None
    if cached is not None and callable(mod):
        # the engine loads the cached object in place of compiling this empty module
        parsed = llvm.parse_assembly("")
    else:
        parsed = llvm.parse_assembly(str(mod()) if callable(mod) else text)
        parsed.verify()
    if cached is None:
        try:
            pto = llvm.create_pipeline_tuning_options(speed_level=3)
            pto.loop_unrolling = False  # unrolled by 2, the pixel-row kernel's loop spills its accumulators
            pb = llvm.create_pass_builder(tm, pto)
            pb.getModulePassManager().run(parsed, pb)
        except AttributeError:  # older llvmlite: the phi form needs no optimisation to be register-resident
            pass
    engine = llvm.create_mcjit_compiler(parsed, tm)
    if path is not None:
        def notify(module: object, data: bytes) -> None:
            write_checked_object(path, bytes(data))

        engine.set_object_cache(notify, lambda module: cached)
    engine.finalize_object()
    return engine


class MachineCode:
    """One LLVM module of micro-kernels, compiled (or loaded from the machine-code cache) on first
    need and its ``symbols`` registered for the numba kernels that call them.

    Nothing is compiled at import: a cold start compiled every module there (5.4 s of LLVM on
    this machine) although a model uses few of them (an LSTM only the packed GEMM kernel).  A
    kernel that calls a symbol gets its module built when numba generates the call
    (:func:`call_codegen`); a kernel loaded from numba's cache generates nothing, so its entry
    builds first what :func:`symbols_called` finds in its code (``entries.entry_address``)."""

    def __init__(self, key: str, build: Callable[[], ir.Module], symbols: tuple[str, ...]):
        self.key, self._build, self.symbols = key, build, symbols
        self._engine: object | None = None
        for sym in symbols:
            _CODE_OF[sym] = self

    def engine(self) -> object:
        """The compiled module (built on the first call; its symbols registered then)."""
        if self._engine is None:
            with _BUILD_LOCK:
                if self._engine is None:
                    engine = compile_module(self._build, cache=True, key=self.key)
                    for sym in self.symbols:
                        llvm.add_symbol(sym, engine.get_function_address(sym))
                        _REGISTERED.add(sym)
                    self._engine = engine
        return self._engine

    def address(self, symbol: str) -> int:
        return self.engine().get_function_address(symbol)

    def cached(self) -> bool:
        """Whether building it would load machine code from the cache rather than compile."""
        path = object_cache_path(generator_source() + self.key)
        return self._engine is not None or (path is not None and os.path.exists(path))

    def build_cold(self) -> None:
        """Compile into the machine-code cache only (a helper process: nothing is registered)."""
        compile_module(self._build, cache=True, key=self.key)


#: symbol -> the MachineCode that defines it
_CODE_OF: dict[str, MachineCode] = {}
#: symbols registered with LLVM in this process (built, or placeholders in a helper process)
_REGISTERED: set[str] = set()
_BUILD_LOCK = threading.RLock()


def machine_code() -> list[MachineCode]:
    """Every micro-kernel module (of the modules imported so far)."""
    return list({id(c): c for c in _CODE_OF.values()}.values())


def ensure_symbols(symbols: Iterable[str]) -> None:
    """Build the modules defining ``symbols`` (those not registered yet)."""
    for sym in symbols:
        if sym not in _REGISTERED:
            _CODE_OF[sym].engine()


def register_placeholders() -> None:
    """Register every micro-kernel symbol at a placeholder address without compiling anything: a
    helper process that only compiles numba kernels into numba's cache links against these
    (the cached code refers to the symbols by name; the process that loads it builds the real
    ones)."""
    for sym in _CODE_OF:
        if sym not in _REGISTERED:
            llvm.add_symbol(sym, PLACEHOLDER_ADDRESS)
            _REGISTERED.add(sym)


def cold_code(symbols: Iterable[str]) -> list[MachineCode]:
    """The modules defining ``symbols`` that are neither built here nor in the machine-code cache."""
    out: list[MachineCode] = []
    for sym in symbols:
        code = _CODE_OF[sym]
        if sym not in _REGISTERED and code not in out and not code.cached():
            out.append(code)
    return out


def symbols_called(fn: object) -> set[str]:
    """The micro-kernel symbols that numba function ``fn`` (a dispatcher, cfunc or Python function)
    calls, directly or through the numba functions it calls: every intrinsic that calls one
    carries them as ``rammer_symbols``; the globals and closure cells of each function's code
    are searched, and the attributes of modules it names."""
    import types as pytypes

    found: set[str] = set()
    seen: set[int] = set()

    def visit(obj: object, names: tuple[str, ...]) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, pytypes.ModuleType):
            for name in names:
                attr = obj.__dict__.get(name)
                if attr is not None:
                    visit(attr, ())
            return
        syms = getattr(obj, "rammer_symbols", None) if not isinstance(obj, type) else None
        if syms:
            found.update(syms)
            return
        py = getattr(obj, "py_func", None) or getattr(obj, "_pyfunc", None)
        if py is None and isinstance(obj, pytypes.FunctionType):
            py = obj
        if py is None:
            return
        codes = [py.__code__]
        while codes:
            code = codes.pop()
            codes.extend(c for c in code.co_consts if isinstance(c, pytypes.CodeType))
            for name in code.co_names:
                if name in py.__globals__:
                    visit(py.__globals__[name], code.co_names)
        for cell in py.__closure__ or ():
            try:
                visit(cell.cell_contents, py.__code__.co_names)
            except ValueError:  # an empty cell
                pass

    visit(fn, ())
    return found


def uses(*symbols: str):
    """Marks an intrinsic as calling ``symbols`` (see :func:`symbols_called`)."""
    def mark(intr):
        intr.rammer_symbols = symbols
        return intr
    return mark


#: Any valid code address: what placeholders point at (they are linked, never called).
PLACEHOLDER_ADDRESS = ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value


def call_codegen(symbol: str, kinds: str):
    """Codegen calling ``symbol`` with the intrinsic's arguments: per letter of ``kinds``, ``i`` an
    integer passed as i64, ``s`` a number passed as a float32, ``f``/``q`` an (array, offset) pair
    passed as a float/i64 pointer."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        params, values, pos = [], [], 0
        s = signature.args
        for kind in kinds:
            if kind == "i":
                params.append(i64)
                values.append(context.cast(builder, args[pos], s[pos], types.int64))
                pos += 1
                continue
            if kind == "s":
                params.append(ir.FloatType())
                values.append(context.cast(builder, args[pos], s[pos], types.float32))
                pos += 1
                continue
            ary = context.make_array(s[pos])(context, builder, args[pos])
            ptr = builder.gep(ary.data, [context.cast(builder, args[pos + 1], s[pos + 1], types.intp)])
            params.append(ptr.type)
            values.append(ptr)
            pos += 2
        ensure_symbols((symbol,))  # the module defining it is built before numba links this code
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), params), symbol)
        builder.call(fn, values)
        return context.get_dummy_value()
    return codegen


def arrays_are(dtype, *arrays) -> bool:
    return all(isinstance(a, types.Array) and a.dtype == dtype for a in arrays)
