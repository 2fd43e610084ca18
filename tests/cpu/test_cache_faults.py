"""Fault injection on the cpu compile cache: every fault ends with a correct model,
or a warning and a compile without the cache.

Faults: each file of an entry damaged in every way (garbage, truncated, empty,
deleted, a folder, a link, a FIFO), one-digit edits that keep the JSON valid,
entries forged with a valid manifest but indices outside the arena, an entry
whose first run fails, an unwritable cache (read-only, full, a file where a
folder should be; simulated, and for real on a tmpfs where this process may
mount one), writers killed mid-write, and processes racing on one cache.
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.cpu import cache_entry
from rammer.backends.cpu.runtime import HostStep
from rammer.time_limits import scaled_limit

FILES = cache_entry.FILES + (cache_entry.MANIFEST,)


# -- one small model, its reference outputs, shared by every test ----------------------------------------

def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "cache-faults", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


class Case:
    def __init__(self, folder: Path):
        self.model = _model()
        self.path = folder / "model.onnx"
        onnx.save(self.model, self.path)
        self.feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)}
        self.want = rammer.compile(self.model, backend="reference")(self.feeds)["y"]
        self.expected = folder / "expected.npz"
        np.savez(self.expected, x=self.feeds["x"], y=self.want)

    def compile(self, cache: Path | str, **options):
        return rammer.compile(self.model, backend="cpu", cache_dir=str(cache), **options)

    def check(self, compiled) -> None:
        np.testing.assert_allclose(compiled(self.feeds)["y"], self.want, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Case:
    return Case(tmp_path_factory.mktemp("cache-faults"))


def _programs(cache: Path) -> Path:
    return cache / "cpu" / "programs"


def _entry(cache: Path) -> Path:
    [entry] = [Path(p) for p in glob.glob(str(_programs(cache) / "*"))]
    return entry


def _leftovers(cache: Path) -> list[str]:
    return glob.glob(str(_programs(cache) / ".tmp-*")) + glob.glob(str(_programs(cache) / ".trash-*"))


def _fresh_entry(case: Case, cache: Path) -> Path:
    first = case.compile(cache)
    assert first.executable.cache_status == "miss"
    case.check(first)
    return _entry(cache)


def _rebuilt_then_hit(case: Case, cache: Path) -> str:
    again = case.compile(cache)
    status = again.executable.cache_status
    assert status.startswith("rebuilt"), status
    case.check(again)
    third = case.compile(cache)
    assert third.executable.cache_status == "hit"
    case.check(third)
    assert not _leftovers(cache)
    return status


# -- damaged files -------------------------------------------------------------------------------------

def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(bytes(b ^ 0x5A for b in data[:4096]) + data[4096:])
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "deleted":
        path.unlink()
    elif how == "folder":
        path.unlink()
        path.mkdir()
    elif how == "link":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif how == "extra byte":
        path.write_bytes(data + b"\n")
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["garbage", "truncated", "empty", "deleted", "folder", "link", "fifo", "extra byte"])
@pytest.mark.parametrize("name", FILES)
def test_every_damaged_file_is_detected_and_rebuilt(case, tmp_path, caplog, name, how):
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    _damage(entry / name, how)
    with caplog.at_level(logging.WARNING, logger="rammer"):
        status = _rebuilt_then_hit(case, cache)
    assert any("unusable" in r.getMessage() for r in caplog.records if r.name == "rammer"), status


def test_one_digit_edits_of_the_json_files_never_change_a_result(case, tmp_path):
    """The issue's experiment: random one-digit edits that keep the JSON valid (4 in 30 gave
    wrong outputs before the manifest), here on meta.json, the manifest and schedules.json."""
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    rng = np.random.default_rng(30)
    edits = 0
    for name in ("meta.json", cache_entry.MANIFEST, "schedules.json"):
        for _ in range(30 if name == "meta.json" else 10):
            entry = _entry(cache)
            text = (entry / name).read_text(encoding="utf-8")
            digits = [i for i, ch in enumerate(text) if ch.isdigit()]
            while True:
                # Only edits that keep the JSON valid count (a leading 0 does not: "15104" -> "05104").
                # The entry holds timings, so the text, and which edits are valid, differ run to run.
                i = int(rng.choice(digits))
                new = str((int(text[i]) + int(rng.integers(1, 10))) % 10)
                edited = text[:i] + new + text[i + 1:]
                try:
                    json.loads(edited)
                except json.JSONDecodeError:
                    continue
                break
            (entry / name).write_text(edited, encoding="utf-8")
            again = case.compile(cache)
            assert again.executable.cache_status.startswith("rebuilt"), (name, i)
            case.check(again)
            edits += 1
    assert edits == 50
    assert case.compile(cache).executable.cache_status == "hit"


def test_reordered_kernel_names_are_caught(case, tmp_path):
    """The issue's segfault: swapping two kernel names in meta.json (valid JSON, plausible names)
    made rows call the wrong kernel with another kernel's parameters."""
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
    names = meta["kernel_names"]
    assert len(names) >= 3, names
    names[1], names[2] = names[2], names[1]
    (entry / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    status = _rebuilt_then_hit(case, cache)
    assert "meta.json" in status, status


def test_a_stray_file_in_place_of_an_entry_is_replaced(case, tmp_path):
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    shutil.rmtree(entry)
    entry.write_bytes(b"")
    _rebuilt_then_hit(case, cache)
    assert entry.is_dir()


def test_a_temporary_folder_is_never_loaded(case, tmp_path):
    """A complete entry still under its temporary name is not an entry."""
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    entry.rename(entry.parent / ".tmp-elsewhere-1-abcd")
    assert case.compile(cache).executable.cache_status == "miss"


# -- forged entries: a valid manifest over out-of-bounds tables --------------------------------------

def _forge(entry: Path, change) -> None:
    blobs, consts = cache_entry.read_verified(str(entry), entry.name)
    program, _ = cache_entry.load_program(blobs, consts, num_nodes=10**6)
    schedules = json.loads(blobs["schedules.json"])
    change(program)
    files = cache_entry.encode(program, None, (blobs["graph.json"], blobs["graph.npz"]))
    files["schedules.json"] = json.dumps(schedules).encode()
    files[cache_entry.MANIFEST] = cache_entry.manifest(entry.name, files)
    for name, data in files.items():
        (entry / name).write_bytes(bytes(memoryview(data)))


def _set_row(p, col, value, barrier=False):
    p.T = p.T.copy()
    if barrier:
        p.T[0, 0] = 0
    p.T[0, col] = value


def _set_tensor(p, name, offset=None, strides=None):
    dtype, off, shape, st = p.tensors[name]
    p.tensors = dict(p.tensors)
    p.tensors[name] = (dtype, off if offset is None else offset, shape, st if strides is None else strides)


def _set_range(p, starts=None, ends=None):
    seg = p.steps[0]
    if starts is not None:
        seg.starts = np.array(starts, np.int64)
    if ends is not None:
        seg.ends = np.array(ends, np.int64)


FORGERIES = {
    "kernel id past the names": (lambda p: _set_row(p, 0, len(p.kernel_names)), "kernel ids"),
    "negative kernel id": (lambda p: _set_row(p, 0, -3), "kernel ids"),
    "scratch past the arena": (lambda p: _set_row(p, 1, p.arena_bytes), "scratch"),
    "negative scratch": (lambda p: _set_row(p, 1, -8), "scratch"),
    "barrier on a missing vEU": (lambda p: (_set_row(p, 2, p.num_veus + 3, barrier=True)), "barrier"),
    "barrier on itself": (lambda p: (_set_row(p, 2, 0, barrier=True)), "barrier"),
    "row range past the table": (lambda p: _set_range(p, ends=[p.T.shape[0] + 5] * p.num_veus), "row ranges"),
    "row range backwards": (lambda p: _set_range(p, starts=[1] * p.num_veus, ends=[0] * p.num_veus), "row ranges"),
    "tensor past the arena": (lambda p: _set_tensor(p, "y", offset=p.arena_bytes - 4), "outside the arena"),
    "tensor before the arena": (lambda p: _set_tensor(p, "x", strides=(192, -1000, 8, 1)), "outside the arena"),
    "host step of a missing node": (lambda p: p.steps.append(HostStep(10**4, "forged")), "host step"),
    "constants larger than the arena": (lambda p: setattr(p, "arena_bytes", p.const_bytes - 4), "constant"),
    "unknown kernel": (lambda p: p.kernel_names.__setitem__(1, "k_system"), "kernel names"),
    "barrier not the first kernel": (lambda p: p.kernel_names.insert(0, p.kernel_names.pop()), "kernel names"),
    "a kernel named twice": (lambda p: p.kernel_names.__setitem__(-1, p.kernel_names[1]), "kernel names"),
    "cores for other vEUs": (lambda p: setattr(p, "cores", p.cores + [-1]), "cores"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_forged_out_of_bounds_entries_are_refused(case, tmp_path, forgery):
    change, reason = FORGERIES[forgery]
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    _forge(entry, change)
    status = _rebuilt_then_hit(case, cache)
    assert reason in status, status


def test_a_forged_entry_that_passes_the_checks_is_still_accepted_unchanged(case, tmp_path):
    """The forging helper itself changes nothing when the change is empty (so the refusals above
    come from the changes, not from the forging)."""
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    _forge(entry, lambda p: None)
    hit = case.compile(cache)
    assert hit.executable.cache_status == "hit"
    case.check(hit)


def test_an_entry_whose_first_run_fails_is_rebuilt(case, tmp_path, caplog):
    """An entry that loads but cannot run (here: the output has no placement) is rebuilt on its
    first run, which then succeeds; the entry on disk is replaced by a good one."""
    cache = tmp_path / "cache"
    entry = _fresh_entry(case, cache)
    _forge(entry, lambda p: p.tensors.pop("y"))
    loaded = case.compile(cache)
    assert loaded.executable.cache_status == "hit"
    with caplog.at_level(logging.WARNING, logger="rammer"):
        case.check(loaded)
    assert loaded.executable.cache_status.startswith("rebuilt (first run failed")
    assert any("first run" in r.getMessage() for r in caplog.records if r.name == "rammer")
    case.check(loaded)
    again = case.compile(cache)
    assert again.executable.cache_status == "hit" and "y" in again.executable.program.tensors
    case.check(again)


def test_a_feed_error_on_the_first_run_is_the_callers(case, tmp_path):
    cache = tmp_path / "cache"
    _fresh_entry(case, cache)
    hit = case.compile(cache)
    with pytest.raises(rammer.errors.FeedError):
        hit.executable.run({"x": np.zeros((2, 2), np.float32)})
    assert hit.executable.cache_status == "hit"
    case.check(hit)


# -- an unwritable cache -------------------------------------------------------------------------------

def _under(path, root: Path) -> bool:
    try:
        return os.path.abspath(os.fsdecode(path)).startswith(str(root))
    except TypeError:
        return False


def _simulate(kind: str, root: Path, monkeypatch) -> Path:
    """Make ``root`` unwritable the way ``kind`` says; returns the cache_dir to use."""
    if kind == "zero-byte file as cache folder":
        root.parent.mkdir(parents=True, exist_ok=True)
        root.write_bytes(b"")
        return root
    if kind == "zero-byte file as programs folder":
        (root / "cpu").mkdir(parents=True)
        (root / "cpu" / "programs").write_bytes(b"")
        return root
    real_mkdir, real_open, real_write = os.mkdir, os.open, os.write
    if kind == "read-only":
        def mkdir(path, *a, **k):
            if _under(path, root):
                raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
            return real_mkdir(path, *a, **k)

        def open_(path, flags, *a, **k):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _under(path, root):
                raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
            return real_open(path, flags, *a, **k)

        monkeypatch.setattr(os, "mkdir", mkdir)
        monkeypatch.setattr(os, "open", open_)
        return root
    if kind == "full":
        def write(fd, data):
            # every write under the cache gets half its bytes down, then the disk is full
            target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
            if target.startswith(str(root)):
                if len(data) > 1:
                    return real_write(fd, bytes(data[: len(data) // 2]))
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
        return root
    raise AssertionError(kind)


UNWRITABLE = ["read-only", "full", "zero-byte file as cache folder", "zero-byte file as programs folder"]


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_an_unwritable_cache_warns_once_and_compiles_without_it(case, tmp_path, monkeypatch, caplog, kind):
    cache = _simulate(kind, tmp_path / "cache", monkeypatch)
    with caplog.at_level(logging.WARNING, logger="rammer"):
        for _ in range(3):
            model = case.compile(cache)
            assert model.executable.cache_status.startswith("miss (not saved"), model.executable.cache_status
            case.check(model)
    warnings = [r.getMessage() for r in caplog.records if r.name == "rammer" and "cache" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "cannot be written" in warnings[0]
    monkeypatch.undo()
    if os.path.isdir(_programs(cache)):
        assert not _leftovers(cache) and not os.listdir(_programs(cache))


def test_a_read_only_cache_still_serves_its_entries(case, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    _fresh_entry(case, cache)
    _simulate("read-only", cache, monkeypatch)
    hit = case.compile(cache)
    assert hit.executable.cache_status == "hit"
    case.check(hit)


# -- real filesystems, where this process may mount a tmpfs --------------------------------------------

@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(folder: Path, options: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root and mount(8)")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"this process may not mount a tmpfs: {done.stderr.decode(errors='replace').strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_really_full_disk(case, tmp_path, tmpfs, caplog):
    cache = tmpfs(tmp_path / "small", "size=4k")
    with caplog.at_level(logging.WARNING, logger="rammer"):
        for _ in range(2):
            model = case.compile(cache)
            assert model.executable.cache_status.startswith("miss (not saved"), model.executable.cache_status
            case.check(model)
    assert len([r for r in caplog.records if r.name == "rammer" and "cannot be written" in r.getMessage()]) == 1
    assert not _leftovers(cache)


def test_a_really_read_only_cache(case, tmp_path, tmpfs, caplog):
    cache = tmpfs(tmp_path / "ro", "size=16m")  # (1 MiB held no entry on an AVX-512 host)
    entry = _fresh_entry(case, cache)
    _damage(entry / "consts.bin", "garbage")
    subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
    with caplog.at_level(logging.WARNING, logger="rammer"):
        for _ in range(2):
            model = case.compile(cache)  # the corrupt entry cannot be removed nor replaced
            assert model.executable.cache_status.startswith("rebuilt"), model.executable.cache_status
            assert "not saved" in model.executable.cache_status
            case.check(model)
    assert len([r for r in caplog.records if r.name == "rammer" and "cannot be written" in r.getMessage()]) == 1


# -- other processes: killed while writing, and racing -------------------------------------------------

_CHILD_PRELUDE = """
import os, sys, signal, shutil, glob
import numpy as np
import rammer
from rammer.backends.cpu import cache_entry
model, cache, expected = sys.argv[1], sys.argv[2], np.load(sys.argv[3])
def check():
    m = rammer.compile(model, backend="cpu", cache_dir=cache)
    got = m({"x": expected["x"]})["y"]
    np.testing.assert_allclose(got, expected["y"], rtol=1e-4, atol=1e-6)
    return m.executable.cache_status
"""

_KILLER = _CHILD_PRELUDE + """
point = sys.argv[4]
real_write, real_fsync_dir = cache_entry.write_file, cache_entry.fsync_dir
written = []
def write_file(path, data):
    if point == os.path.basename(path):
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    real_write(path, data)
    written.append(path)
def fsync_dir(path):
    if point == "rename" and os.path.basename(path).startswith(".tmp-"):
        os.kill(os.getpid(), signal.SIGKILL)
    real_fsync_dir(path)
cache_entry.write_file, cache_entry.fsync_dir = write_file, fsync_dir
check()
print("not killed")
"""


def _child_env() -> dict:
    return dict(os.environ, NUMBA_NUM_THREADS=os.environ.get("NUMBA_NUM_THREADS", "2"))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["tables.npz", "meta.json", cache_entry.MANIFEST, "rename"])
def test_a_writer_killed_mid_write_leaves_nothing_a_load_accepts(case, tmp_path, point):
    cache = tmp_path / "cache"
    child = subprocess.run([sys.executable, "-c", _KILLER, str(case.path), str(cache), str(case.expected), point],
                           capture_output=True, text=True, timeout=scaled_limit(600), env=_child_env())
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]
    [left] = _leftovers(cache)
    assert not [p for p in os.listdir(_programs(cache)) if not p.startswith(".")]
    if point != "rename":
        # even moved to where the entry belongs, the half-written folder is refused
        key = _fresh_entry(case, tmp_path / "elsewhere").name
        os.rename(left, _programs(cache) / key)
        _rebuilt_then_hit(case, cache)
    else:
        model = case.compile(cache)
        assert model.executable.cache_status == "miss"
        case.check(model)
        assert case.compile(cache).executable.cache_status == "hit"
    assert not _leftovers(cache), "the dead writer's temporary folder was not swept"


_RACER = _CHILD_PRELUDE + """
rounds, me = int(sys.argv[4]), int(sys.argv[5])
sys.stdin.read(1)  # every racer starts together
statuses = []
for i in range(rounds):
    statuses.append(check().split(" (")[0])
    entries = [p for p in glob.glob(os.path.join(cache, "cpu", "programs", "*"))]
    if (i + me) % 3 == 1:
        for p in entries:
            shutil.rmtree(p, ignore_errors=True)
    elif (i + me) % 3 == 2:
        for p in entries:
            for f in glob.glob(os.path.join(p, "*")):
                try:
                    with open(f, "r+b") as fh:
                        fh.write(b"\\xff\\x00garbage")
                except OSError:
                    pass
print("OK", ",".join(statuses))
"""


@pytest.mark.slow
def test_processes_racing_on_one_cache_all_get_correct_models(case, tmp_path):
    """Three processes compile the same model into one cache at once, again and again, while
    deleting and scribbling over the entries the others are loading."""
    cache = tmp_path / "cache"
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(case.path), str(cache), str(case.expected),
                                "8", str(me)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_child_env()) for me in range(3)]
    for r in racers:
        r.stdin.write("go")
        r.stdin.flush()
    results = [r.communicate(timeout=scaled_limit(600)) for r in racers]
    for r, (out, err) in zip(racers, results):
        assert r.returncode == 0 and out.startswith("OK"), out + err[-3000:]
    statuses = {s for out, _ in results for s in out.split()[1].split(",")}
    assert statuses <= {"hit", "miss", "rebuilt"}, statuses
    # whatever the racers left, the next compile is correct and the one after hits
    model = case.compile(cache)
    case.check(model)
    again = case.compile(cache)
    assert again.executable.cache_status == "hit"
    case.check(again)
    assert not _leftovers(cache)


def test_the_child_scripts_are_valid_python():
    for source in (_KILLER, _RACER):
        compile(textwrap.dedent(source), "<child>", "exec")
