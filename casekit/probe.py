"""casekit probe: observes torch.compile runs of a script inside a target environment.

This file stands alone (standard library + torch, no casekit imports) because it
is copied into arbitrary venvs and container images. It imports torch once, then
forks one child per run of each script, so a replay of N scripts pays the import
once while every run starts from the same clean interpreter state.

Usage:  python probe.py REQUEST.json
        python probe.py --serve STATE_DIR   (one import, then one request path per stdin line; see serve())
The request names the scripts and an output folder; the probe writes
``env.json`` once and ``<job>.json`` per script, each atomically. Nothing is
ever parsed from stdout: the scripts under observation print whatever they like.

The probe observes and reports raw facts (log records, calls, exceptions,
timings). Interpreting them - which break is which, across releases - is done by
casekit on the host, where it can be tested and improved without touching the
environments.
"""

from __future__ import annotations

import os
import sys

# Run as `python probe.py`, this file's folder is sys.path[0]; a folder there
# named like a stdlib module (a user's `bisect/`, `copy.py`) would shadow it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import difflib  # noqa: E402
import errno  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import stat as stat_module  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

PROBE_SCHEMA = "casekit.probe/1"
REQUEST_SCHEMA = "casekit.probe-request/1"
MAX_TEXT = 20000  # a log record or output tail is cut here: bundles stay reviewable
RUN_RESULT, RUN_STDOUT, RUN_STDERR, EAGER_OUTPUTS = (
    ".casekit-run.json",
    ".casekit.stdout",
    ".casekit.stderr",
    "eager.pt",
)
MAX_RUN_RESULT_BYTES = 64 * 1024 * 1024
WAIT_FALLBACK_S = 0.005  # how long to sleep between checks where a child's exit cannot be waited for
# rollback: compiled with fullgraph=False forced; perf: compiled with the script's own backend, its compile
# timed (cache cold or warm) and its entry points then called in timed blocks, eager and compiled in turn
RUN_MODES = ("eager", "compiled", "fullgraph", "rollback", "perf")
EAGER_AHEAD = "eager-run.json"  # an eager run made while Dynamo loaded (runs_dir/<job>.eager-run.json)


# --------------------------------------------------------------------------- io


def write_json_atomic(path, data):
    """Write JSON so a reader never sees half a file (rename is atomic)."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    # Readable like any file written (mkstemp makes 0600): in a container the probe writes as root and
    # casekit reads on the host as the user it runs as. The folders around keep it private.
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, default=repr)
    os.replace(tmp, path)


def clip(text, limit=MAX_TEXT):
    text = text if isinstance(text, str) else repr(text)
    return text if len(text) <= limit else text[: limit // 2] + "\n[...cut...]\n" + text[-limit // 2 :]


def read_tail(path, limit=4000):
    """The end of a run's output file; never through a link (a run may replace its file with one)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat_module.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return ""
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def copy_regular(source, target):
    """Copy `source` to `target` if it is a regular file (a run's file: never through a link)."""
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        if not stat_module.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False
        with open(target, "wb") as copy:
            shutil.copyfileobj(handle, copy)
    return True


MAX_REMOVE_ROUNDS = 100000  # remove_tree gives up after this many passes (something keeps adding files)


def remove_tree(path):
    """Remove `path` and everything below it, never through a link, however deep; errors are skipped.

    A run can nest folders thousands deep, and shutil.rmtree recurses (RecursionError, one open
    folder per level): here each folder met is emptied by moving what it holds up into `path`,
    so neither the stack nor the open files grow with the nesting."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        try:
            os.unlink(name, dir_fd=parent_fd)  # a file or a link: that is all
            return
        except OSError:
            pass
        try:
            top = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        except OSError:
            return
        try:
            _empty_folder(top)
        finally:
            os.close(top)
        try:
            os.rmdir(name, dir_fd=parent_fd)
        except OSError:
            pass
    finally:
        os.close(parent_fd)


def _empty_folder(top):
    """Delete what the folder open as `top` holds: files and empty folders go, a folder's contents move
    up into `top`; until it is empty or a pass changes nothing."""
    moved = 0
    for _ in range(MAX_REMOVE_ROUNDS):
        try:
            names = os.listdir(top)
        except OSError:
            return
        changed = False
        for name in names:
            try:
                os.unlink(name, dir_fd=top)
                changed = True
                continue
            except OSError:
                pass
            try:
                os.rmdir(name, dir_fd=top)
                changed = True
                continue
            except OSError:
                pass
            inner = _open_folder(name, top)
            if inner is None:
                continue
            try:
                for below in os.listdir(inner):
                    moved += 1
                    try:
                        os.rename(below, f".casekit-removing-{moved}", src_dir_fd=inner, dst_dir_fd=top)
                        changed = True
                    except OSError:
                        pass
            except OSError:
                pass
            finally:
                os.close(inner)
        if not changed:
            return


def _open_folder(name, parent):
    """The folder `name` in `parent`, opened (made searchable first if its owner closed it); None otherwise."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=parent)
    except PermissionError:
        pass
    except OSError:
        return None
    try:
        if stat_module.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            os.chmod(name, 0o700, dir_fd=parent)  # a folder, not a link: nothing else is changed
            return os.open(name, flags, dir_fd=parent)
    except OSError:
        pass
    return None


# ------------------------------------------------------------------ environment


def _version_of(module_name):
    try:
        module = __import__(module_name)
        return getattr(module, "__version__", None)
    except Exception:
        return None


def collect_environment(torch):
    """What `collect_env` would tell, cheaply: versions, CUDA, devices."""
    env = {
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "torch_cuda": getattr(torch.version, "cuda", None),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": _version_of("numpy"),
        "triton": None,
        "cudnn": None,
        "cuda_available": False,
        "gpus": [],
        "driver": None,
    }
    try:
        import importlib.metadata as md

        env["triton"] = md.version("triton")
    except Exception:
        pass
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    try:
        # Safe here: this runs in a throwaway child (see collect_environment_isolated).
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            env["gpus"] = env["gpus"] or _gpu_names_without_cuda_init()
            env["driver"] = _driver_version()
    except Exception:
        pass
    return env


def collect_environment_isolated(torch, out_dir):
    """collect_environment in a forked child.

    Asking CUDA anything initialises it, and a process that initialised CUDA
    cannot hand it to forked children ("Cannot re-initialize CUDA in forked
    subprocess"): the parent that forks every script run must never touch it.
    """
    path = os.path.join(out_dir, ".environment.json")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            write_json_atomic(path, collect_environment(torch))
        finally:
            os._exit(0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        wait_for_exit([pid], deadline)
    else:
        _kill_group(pid)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "note": "environment details unavailable",
        }


def _gpu_names_without_cuda_init():
    names = []
    base = "/proc/driver/nvidia/gpus"
    try:
        for entry in sorted(os.listdir(base)):
            with open(os.path.join(base, entry, "information")) as handle:
                for line in handle:
                    if line.startswith("Model:"):
                        names.append(line.split(":", 1)[1].strip())
    except OSError:
        pass
    return names


def _driver_version():
    try:
        with open("/proc/driver/nvidia/version") as handle:
            first = handle.readline()
        for token in first.split():
            if token.count(".") >= 1 and token.replace(".", "").isdigit():
                return token
    except OSError:
        pass
    return None


_PACKAGE_OWNERS = None


def package_owners():
    """Top-level module -> distributions; scanning site-packages costs ~0.3 s, so the
    parent does it once and every forked child inherits the answer."""
    global _PACKAGE_OWNERS
    if _PACKAGE_OWNERS is None:
        try:
            import importlib.metadata as md

            _PACKAGE_OWNERS = md.packages_distributions()
        except Exception:
            _PACKAGE_OWNERS = {}
    return _PACKAGE_OWNERS


def imported_package_versions(module_names):
    """Map the top-level modules a script imported to installed distributions."""
    try:
        import importlib.metadata as md
    except Exception:
        return {}
    owners = package_owners()
    versions = {}
    for name in sorted(module_names):
        for dist in owners.get(name, []):
            try:
                versions[dist] = md.version(dist)
            except Exception:
                pass
    return versions


# ------------------------------------------------------------- Dynamo settings

# Dynamo settings that change what breaks look like (where Dynamo resumes, what it traces through,
# what recompiles): each target records those its release has, with their defaults. Names differ
# across releases (cache_size_limit became recompile_limit); a name a release lacks is left out.
SHAPE_SETTINGS = (
    "nested_graph_breaks",
    "capture_scalar_outputs",
    "capture_dynamic_output_shape_ops",
    "recompile_limit",
    "cache_size_limit",
    "accumulated_recompile_limit",
    "accumulated_cache_size_limit",
    "automatic_dynamic_shapes",
    "assume_static_by_default",
    "specialize_int",
    "specialize_float",
    "suppress_errors",
    "trace_numpy",
    "enable_trace_contextlib",
    "graph_break_on_nn_param_ctor",
    "capture_autograd_function",
    "capture_func_transforms",
    "inline_inbuilt_nn_modules",
    "skip_nnmodule_hook_guards",
    "allow_unspec_int_on_nn_module",
    "dont_skip_tracing",
    "error_on_recompile",
)
STANCE = "stance"  # not a config name: torch.compiler.set_stance (2.6+), set with --dynamo stance=NAME


def _config_entries(config):
    """name -> (default, alias or None) for every setting of a Dynamo config module, from its own tables
    (2.6+ keeps _ConfigEntry objects in `_config`; 2.5 keeps `_default` and `_allowed_keys`)."""
    entries = {}
    table = getattr(config, "_config", None)  # before 2.6 it holds the current values, not entries
    if isinstance(table, dict) and table and all(hasattr(entry, "default") for entry in table.values()):
        for name, entry in table.items():
            entries[name] = (getattr(entry, "default", None), getattr(entry, "alias", None))
        return entries
    defaults = getattr(config, "_default", None)
    if isinstance(defaults, dict):
        for name, value in defaults.items():
            entries[name] = (value, None)
    return entries


def _plain(value):
    """A setting's value as JSON holds it (sets and other objects by repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)[:200]


def current_stance(torch):
    """The compiler stance's name, or None on a release without stances."""
    try:
        from torch._dynamo import eval_frame

        stance = getattr(eval_frame, "_stance", None)
        return None if stance is None else str(getattr(stance, "stance", stance))
    except Exception:
        return None


def dynamo_settings(torch, config_asked=None):
    """The shape-changing settings this release has: name -> {"value", "default"} (and "set": True for the
    ones the replay set), the stance among them. Read without getattr: a deprecated name would warn."""
    try:
        import torch._dynamo.config as config
    except Exception:
        return {}
    entries = _config_entries(config)
    asked = dict(config_asked or {})
    settings = {}
    for name in list(SHAPE_SETTINGS) + sorted(set(asked) - set(SHAPE_SETTINGS) - {STANCE}):
        if name not in entries:
            continue
        default, alias = entries[name]
        if alias:  # an old name kept for a new one (cache_size_limit -> recompile_limit): the new one's values
            target = str(alias).rsplit(".", 1)[-1]
            default = entries.get(target, (default, None))[0]
        try:
            with warnings.catch_warnings():  # a deprecated setting warns when read: the record is not the user's
                warnings.simplefilter("ignore")
                value = getattr(config, str(alias).rsplit(".", 1)[-1] if alias else name)
        except Exception:
            value = default
        settings[name] = {"value": _plain(value), "default": _plain(default)}
        if alias:
            settings[name]["alias_of"] = str(alias)
    stance = current_stance(torch)
    if stance is not None:
        settings[STANCE] = {"value": stance, "default": "default"}
    for name, value in asked.items():
        if name in settings:
            settings[name]["value"] = _plain(value)
            settings[name]["set"] = True
    return settings


def check_dynamo_config(torch, config_asked):
    """Why this release cannot take the settings asked (one line), or None: every name exists, every
    value has its default's type (a bool for a bool, a number for a number)."""
    try:
        import torch._dynamo.config as config
    except Exception as error:
        return f"torch._dynamo.config cannot be imported: {error}"
    entries = _config_entries(config)
    for name, value in sorted(config_asked.items()):
        if name == STANCE:
            if not hasattr(torch.compiler, "set_stance"):
                return f"torch {torch.__version__} lacks torch.compiler.set_stance (asked: --dynamo stance={value})"
            continue
        if name not in entries:
            if hasattr(config, name):  # a release without the tables above: the name is there all the same
                continue
            close = difflib.get_close_matches(name, list(entries), n=3, cutoff=0.6)
            hint = f" (it has: {', '.join(close)})" if close else ""
            return f"torch {torch.__version__} lacks the Dynamo setting torch._dynamo.config.{name}{hint}"
        default = entries[name][0]
        if isinstance(default, bool) and not isinstance(value, bool):
            return f"torch._dynamo.config.{name} takes True or False, not {value!r}"
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"torch._dynamo.config.{name} takes a number, not {value!r}"
    return None


def apply_dynamo_config(torch, config_asked):
    """Set the asked Dynamo settings in this run (a forked child: nothing outlives it)."""
    if not config_asked:
        return
    import torch._dynamo.config as config

    for name, value in sorted(config_asked.items()):
        if name == STANCE:
            torch.compiler.set_stance(value)
        else:
            setattr(config, name, value)


def request_dynamo_config(jobs):
    """The settings a request's jobs ask for (one target's: the same for each job)."""
    asked = {}
    for job in jobs:
        asked.update(job_dynamo_config(job))
    return asked


def job_dynamo_config(job):
    config = job.get("dynamo_config")
    return dict(config) if isinstance(config, dict) else {}


# --------------------------------------------------------------- missing APIs

_NO_ATTRIBUTE = re.compile(r"^module '(?P<owner>[\w.]+)' has no attribute '(?P<name>\w+)'")
_DOES_NOT_EXIST = re.compile(r"^(?P<owner>[\w.]+)\.(?P<name>\w+) does not exist")  # a config module's setattr
_CANNOT_IMPORT = re.compile(r"^cannot import name '(?P<name>\w+)' from '(?P<owner>[\w.]+)'")
_NO_MODULE = re.compile(r"^No module named '(?P<owner>[\w.]+)\.(?P<name>\w+)'")
_NO_STANCE = re.compile(r"^invalid torch\.compile stance '.*?stance='(?P<name>\w+)'")  # raised when compiling


def missing_api(error):
    """The dotted name of what an installed package lacks, when `error` says so, else None.

    From the real exception: an AttributeError on a module (torch.compiler, torch._dynamo.config, a
    library's module), a name that cannot be imported from one, a submodule that does not exist, where
    that module belongs to torch or an installed distribution (never the script's own modules)."""
    stance = _NO_STANCE.match(str(error)) if isinstance(error, RuntimeError) else None
    if stance:
        return f"the compiler stance {stance['name']!r}"
    if not isinstance(error, (AttributeError, ImportError)):
        return None
    owner = name = None
    obj = getattr(error, "obj", None) if isinstance(error, AttributeError) else None
    if obj is not None and isinstance(getattr(obj, "__name__", None), str) and type(obj).__name__ != "type":
        if isinstance(obj, type(os)):  # a module (config modules are module subclasses)
            owner, name = obj.__name__, getattr(error, "name", None)
    if owner is None or not name:
        text = str(error)
        for pattern in (_NO_ATTRIBUTE, _DOES_NOT_EXIST, _CANNOT_IMPORT, _NO_MODULE):
            match = pattern.match(text)
            if match:
                owner, name = match["owner"], match["name"]
                break
    if owner is None or not name:
        return None
    top = owner.split(".")[0]
    module = sys.modules.get(owner) or sys.modules.get(top)
    if top != "torch" and top not in package_owners():
        return None  # not a package's: the script's own module, or nothing installed
    if module is not None and _in_script_folder(module):
        return None
    return f"{owner}.{name}"


def _in_script_folder(module):
    where = getattr(module, "__file__", None) or ""
    return bool(where) and os.path.abspath(where).startswith(os.path.abspath(os.getcwd()) + os.sep)


# ---------------------------------------------------------------- observation


class Observation:
    """Everything one run of one script records, as plain data."""

    def __init__(self, mode):
        self.data = {
            "mode": mode,
            "status": "running",
            "exception": None,
            "exit_code": None,
            "calls": [],
            "entries": {},
            "records": [],
            "trace_events": [],
            "graphs": [],
            "counters": {},
            "compilation_metrics": [],
            "imported_packages": {},
            "started": time.time(),
            "wall_s": None,
        }

    def add_record(self, kind, record):
        exc = record.exc_info[1] if record.exc_info else None
        try:
            message = record.getMessage()
        except Exception as error:  # a broken %-format must not lose the run
            message = f"<unformattable log record: {error!r}>"
        entry = {
            "kind": kind,
            "logger": record.name,
            "level": record.levelname,
            "message": clip(message),
        }
        if exc is not None:
            entry["exc_type"] = type(exc).__name__
            entry["exc_message"] = clip(str(exc), 8000)
            for attribute in ("gb_type", "case_name"):
                value = getattr(exc, attribute, None)
                if isinstance(value, str):
                    entry["exc_" + attribute] = value
        self.data["records"].append(entry)


def describe_value(value, torch, depth=0):
    if isinstance(value, torch.Tensor):
        described = {
            "kind": "tensor",
            "shape": list(value.shape),
            "dtype": str(value.dtype).replace("torch.", ""),
            "device": str(value.device),
            "requires_grad": bool(value.requires_grad),
        }
        described.update(tensor_layout(value))
        return described
    if depth < 2 and isinstance(value, (list, tuple)):
        return {
            "kind": type(value).__name__,
            "items": [describe_value(v, torch, depth + 1) for v in value[:16]],
            "length": len(value),
        }
    if depth < 2 and isinstance(value, dict):
        return {
            "kind": "dict",
            "items": {str(k): describe_value(v, torch, depth + 1) for k, v in list(value.items())[:16]},
            "length": len(value),
            "str_keys": all(isinstance(k, str) for k in value),
        }
    if isinstance(value, (bool, int, float)) or value is None:
        return {"kind": type(value).__name__, "value": value}
    if isinstance(value, str):
        return {"kind": "str", "value": value[:80], "length": len(value)}
    return {"kind": type(value).__name__}


def tensor_layout(tensor):
    """Strides, contiguity and the dims marked dynamic (symbolic) by torch._dynamo.mark_dynamic."""
    layout = {}  # type: dict
    try:
        layout["strides"] = [int(s) for s in tensor.stride()]
        layout["contiguous"] = bool(tensor.is_contiguous())
    except Exception:  # sparse and some subclasses have no strides
        pass
    dynamic = getattr(tensor, "_dynamo_dynamic_indices", None)
    if dynamic:
        layout["dynamic_dims"] = sorted(int(d) for d in dynamic)
    return layout


def flatten_tensors(value, torch, out, odd=None):
    """Tensors of an output, in a stable order, detached onto the CPU; a tensor subclass through its plain
    tensor view (its own __torch_function__ never runs here, and a file of plain tensors needs no class of
    the script to load). `odd` collects the type names of what cannot be compared (an object of the
    script's, a tensor without data of its own): said as "outputs not comparable", never a crash."""
    if isinstance(value, torch.Tensor):
        plain = plain_tensor(value, torch)
        if plain is None:
            if odd is not None:
                odd.append(type(value).__name__)
        else:
            out.append(plain)
    elif isinstance(value, (list, tuple)):
        for item in value:
            flatten_tensors(item, torch, out, odd)
    elif isinstance(value, dict):
        for key in sorted(value, key=repr):
            flatten_tensors(value[key], torch, out, odd)
    elif hasattr(value, "__dataclass_fields__") or hasattr(value, "to_tuple"):
        # model outputs (transformers' ModelOutput) carry tensors as fields
        try:
            fields = tuple(value.to_tuple()) if hasattr(value, "to_tuple") else vars(value)
        except Exception:
            fields = None
        if fields is None and odd is not None:
            odd.append(type(value).__name__)
        elif fields is not None:
            flatten_tensors(fields, torch, out, odd)
    elif value is not None and not isinstance(value, (bool, int, float, complex, str, bytes)) and odd is not None:
        odd.append(type(value).__name__)
    return out


def plain_tensor(value, torch):
    """A tensor's plain-Tensor view, detached, on the CPU, or None when it has no data of its own to compare
    (a wrapper subclass whose data lives in inner tensors, a meta tensor)."""
    try:
        if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
            disabled = getattr(torch._C, "DisableTorchFunctionSubclass", None) or torch._C.DisableTorchFunction
            with disabled():
                value = value.as_subclass(torch.Tensor)
        plain = value.detach().to("cpu")
        plain.reshape(-1)[:1].tolist()  # reads the data: a wrapper subclass's view has none to read
        return plain
    except Exception:
        return None


def not_comparable(what):
    """A comparison that could not be made: not a mismatch, never a pass."""
    return {"allclose": None, "max_abs": None, "max_rel": None, "detail": f"outputs not comparable: {what}"}


def comparison(eager, compiled, odd, interceptor):
    """Eager's output tensors against the compiled run's, and what neither could compare said beside."""
    if not eager and not compiled and odd:
        return not_comparable(", ".join(odd))
    compared = compare_outputs(eager, compiled, interceptor.torch, *interceptor.tolerances)
    if odd:
        said = f"outputs not comparable: {', '.join(odd)}"
        compared["detail"] = f"{compared['detail']}; {said}" if compared["detail"] else said
    return compared


def compare_outputs(eager, compiled, torch, rtol, atol):
    if len(eager) != len(compiled):
        return {"allclose": False, "max_abs": None, "max_rel": None, "detail": "different number of output tensors"}
    max_abs = 0.0
    max_rel = 0.0
    close = True
    for a, b in zip(eager, compiled):
        if a.shape != b.shape or a.dtype != b.dtype:
            return {"allclose": False, "max_abs": None, "max_rel": None, "detail": "shape or dtype differs"}
        if a.numel() == 0:
            continue
        if not (a.is_floating_point() or a.is_complex()):
            same = bool(torch.equal(a, b))
            close = close and same
            max_abs = max(max_abs, 0.0 if same else float("inf"))
            continue
        diff = (a.double() - b.double()).abs()
        diff = torch.nan_to_num(diff, nan=0.0)
        max_abs = max(max_abs, float(diff.max()))
        denominator = a.double().abs().clamp_min(1e-12)
        max_rel = max(max_rel, float((diff / denominator).max()))
        close = close and bool(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return {"allclose": close, "max_abs": max_abs, "max_rel": max_rel, "detail": ""}


class CompileInterceptor:
    """Replaces torch.compile so every compiled entry point is observed.

    Works for `@torch.compile`, `@torch.compile(...)`, `torch.compile(fn)` and
    `module.compile()` (which calls torch.compile on `_call_impl`). In eager mode
    the same objects run uncompiled: a function as it is, a module through
    torch's own wrapper with Dynamo disabled (as torch.compile wraps it).
    """

    def __init__(self, torch, observation, mode, backend, eager_outputs, tolerances):
        self.torch = torch
        self.original = torch.compile
        self.observation = observation
        self.mode = mode
        self.backend = backend
        self.eager_outputs = eager_outputs
        self.tolerances = tolerances
        self.outputs = {}
        self.not_comparable = {}  # call index -> type names of the eager output that cannot be compared
        self.call_index = 0
        self.call_sites_under = None  # a folder: record where each call was made from, when it is in there
        # perf: each entry point's first call, to call again in timed blocks: (eager, compiled, args, kwargs)
        self.first_calls = {}
        self.quiet = False  # perf's timed blocks: the entry points' own cost only, nothing recorded
        self.hook_handles = []
        self.counting = {}  # the backend the script asked for -> (it, its counting wrapper)

    def install(self):
        interceptor = self

        def compile(model=None, **kwargs):
            # PyTorch compiles some of its own operators (torch.cond in eager mode):
            # those calls are not the script's entry points and pass straight through.
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("torch.") and caller != "torch.nn.modules.module":
                return interceptor.original(model, **kwargs) if model is not None else interceptor.original(**kwargs)
            if model is None:
                return lambda fn: compile(fn, **kwargs)
            return interceptor.wrap(model, kwargs)

        compile.__doc__ = self.original.__doc__
        self.torch.compile = compile

    def counting_backend(self, requested, inner):
        """One counting wrapper per backend the script asked for (a name, or its own callable), reused by
        every torch.compile call that asks for it: Dynamo's cache entries check the backend (2.13's
        BACKEND_MATCH), so a new closure per call would make a helper compiled under two entry points
        recompile where the script alone does not."""
        key = requested if isinstance(requested, str) else id(requested)
        known = self.counting.get(key)
        if known is not None and known[0] is requested:
            return known[1]
        graphs = self.observation.data["graphs"]

        def backend(gm, example_inputs, **kwargs):
            nodes = list(gm.graph.nodes)
            graphs.append(
                {
                    "code": _graph_code_name(gm),
                    "ops": sum(1 for n in nodes if n.op in ("call_function", "call_method", "call_module")),
                    "inputs": sum(1 for n in nodes if n.op == "placeholder"),
                }
            )
            return inner(gm, example_inputs, **kwargs) if kwargs else inner(gm, example_inputs)

        self.counting[key] = (requested, backend)  # the requested object kept: its id is not reused
        return backend

    def wrap(self, model, kwargs):
        torch = self.torch
        if self.mode == "eager":
            return self.wrap_uncompiled(model)
        kwargs = dict(kwargs)
        requested_backend = kwargs.get("backend", "inductor")
        requested_fullgraph = bool(kwargs.get("fullgraph", False))
        backend_name = (self.backend if not callable(requested_backend) else None) or (
            requested_backend if isinstance(requested_backend, str) else "custom"
        )
        # Force the fast backend over named ones; a callable the script passes is
        # part of the repro (a custom backend is what is under test), so it stays.
        if self.backend and not callable(requested_backend):
            kwargs["backend"] = self.backend
        backend = kwargs.get("backend", "inductor")
        if isinstance(backend, str):
            backend = torch._dynamo.lookup_backend(backend)
        kwargs["backend"] = self.counting_backend(requested_backend, backend)
        if self.mode == "fullgraph":
            kwargs["fullgraph"] = True
        elif self.mode == "rollback":
            kwargs["fullgraph"] = False
        compiled = self.original(model, **kwargs)
        entry = self._entry(model, backend_name, requested_fullgraph, kwargs.get("dynamic"))
        entry["raw"] = (model, compiled)  # perf: what its timed blocks call (popped before the result is written)
        if isinstance(compiled, torch.nn.Module):
            return self._hook_module(compiled, entry)
        return self._wrap_callable(compiled, entry)

    def _entry(self, model, backend_name, requested_fullgraph, dynamic):
        name = _entry_name(model)
        return self.observation.data["entries"].setdefault(
            name,
            {
                "name": name,
                "file": _entry_file(model),
                "line": _entry_line(model),
                "fullgraph_requested": requested_fullgraph,
                "backend": backend_name,
                "dynamic": dynamic,
                "calls": 0,
            },
        )

    def wrap_uncompiled(self, model):
        """The eager baseline: what the script does with torch.compile taken out. A module gets torch's own
        wrapper with Dynamo disabled in it, as torch.compile returns a wrapper and leaves the module as it
        was: a plain `model(x)` beside `compiled(x)` is then an entry call in neither run, and the outputs
        of the two runs pair call for call."""
        entry = self._entry(model, "none", False, None)
        if isinstance(model, self.torch.nn.Module):
            return self._hook_module(self._uncompiled_wrapper(model), entry)
        return self._wrap_callable(model, entry)

    def _uncompiled_wrapper(self, module):
        try:
            from torch._dynamo.eval_frame import DisableContext, OptimizedModule

            return OptimizedModule(module, DisableContext())
        except Exception:  # a release without these private names: the module itself, hooked in place
            return module

    def _record_call(self, entry, args, kwargs, started, output, error):
        elapsed = time.perf_counter() - started
        if self.mode == "perf" and error is None and entry["name"] not in self.first_calls and "raw" in entry:
            self.first_calls[entry["name"]] = (*entry["raw"], args, kwargs)
        index = self.call_index
        self.call_index += 1
        entry["calls"] += 1
        call = {
            "entry": entry["name"],
            "index": index,
            "args": [describe_value(a, self.torch) for a in args],
            "kwargs": {k: describe_value(v, self.torch) for k, v in kwargs.items()},
            "seconds": elapsed,
            "raised": None,
            "comparison": None,
        }
        if self.call_sites_under is not None:
            call["site"] = call_site(self.call_sites_under)
        if error is not None:
            call["raised"] = {"type": type(error).__name__, "message": clip(str(error), 8000)}
        else:
            odd = []  # type: list
            tensors = flatten_tensors(output, self.torch, [], odd)
            if self.mode == "eager":
                self.outputs[index] = tensors
                self.not_comparable[index] = sorted(set(odd))
            elif self.eager_outputs is not None and index in self.eager_outputs.get("outputs", {}):
                eager_odd = self.eager_outputs.get("not_comparable", {}).get(index, [])
                call["comparison"] = comparison(
                    self.eager_outputs["outputs"][index], tensors, sorted(set(odd) | set(eager_odd)), self
                )
            elif self.eager_outputs is not None and self.eager_outputs.get("unreadable"):
                call["comparison"] = not_comparable(self.eager_outputs["unreadable"])
        self.observation.data["calls"].append(call)

    def _wrap_callable(self, compiled, entry):
        interceptor = self

        def observed(*args, **kwargs):
            if interceptor.quiet:
                return compiled(*args, **kwargs)
            started = time.perf_counter()
            try:
                output = compiled(*args, **kwargs)
            except BaseException as error:
                if not isinstance(error, (KeyboardInterrupt, SystemExit)):
                    interceptor._record_call(entry, args, kwargs, started, None, error)
                raise
            interceptor._record_call(entry, args, kwargs, started, output, None)
            return output

        for attribute in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
            try:
                setattr(observed, attribute, getattr(compiled, attribute))
            except (AttributeError, TypeError):
                pass
        return observed

    def _hook_module(self, module, entry):
        interceptor = self
        starts = []  # [started, returned] per call in progress (a module may call itself)

        def before(_module, args, kwargs):
            starts.append([time.perf_counter(), False])

        def after(_module, args, kwargs, output):
            started = starts[-1] if starts else [time.perf_counter(), False]
            started[1] = True
            interceptor._record_call(entry, args, kwargs, started[0], output, None)

        def finally_(_module, args, kwargs, output):
            # always_call: torch runs it from its `except` when forward raised, so a compiled call that
            # raised (a crash under compile) is a call, as it is for a function entry point
            started, returned = starts.pop() if starts else (time.perf_counter(), True)
            error = sys.exc_info()[1]
            if not returned and error is not None:
                interceptor._record_call(entry, args, kwargs, started, None, error)

        handles = self.hook_handles
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
        try:
            handles.append(module.register_forward_hook(finally_, with_kwargs=True, always_call=True))
        except TypeError:  # torch before 2.1: no always_call; a raising forward goes unrecorded
            pass
        return module


def _outer_frames(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


def call_site(root):
    """Where the script called a compiled entry point: the first frame outside the probe and torch (a
    module's call goes through torch's hooks), as a path relative to `root` and the call's positions
    (line, end line, columns: Python 3.11+ knows the expression's columns). None when that frame is not
    in a file under `root` (a library calling a compiled function)."""
    probe_file = call_site.__code__.co_filename
    torch_folder = os.path.dirname(sys.modules["torch"].__file__ or "") + os.sep
    frame = next(
        (
            f
            for f in _outer_frames(sys._getframe(1))
            if f.f_code.co_filename != probe_file and not f.f_code.co_filename.startswith(torch_folder)
        ),
        None,
    )
    if frame is None:
        return None
    path = os.path.realpath(frame.f_code.co_filename)
    if not path.startswith(root):
        return None
    site = {"file": path[len(root) :].replace(os.sep, "/"), "line": frame.f_lineno}
    positions = getattr(frame.f_code, "co_positions", None)
    if positions is not None and frame.f_lasti >= 0:
        # one position per 2-byte code unit; f_lasti is the CALL's byte offset
        position = next(itertools.islice(positions(), frame.f_lasti // 2, None), None)
        if position is not None and all(isinstance(p, int) for p in position):
            site["line"], site["end_line"], site["col"], site["end_col"] = position
    return site


def _graph_code_name(gm):
    try:
        return gm._code_name  # not always present; purely informative
    except Exception:
        return type(gm).__name__


def _entry_name(model):
    target = getattr(model, "__func__", model)
    if hasattr(model, "__self__") and getattr(target, "__name__", "") == "_call_impl":
        return type(model.__self__).__name__  # module.compile() hands over _call_impl
    qualname = getattr(target, "__qualname__", None) or getattr(type(target), "__qualname__", None)
    return str(qualname or repr(target)[:60])


def _entry_code(model):
    target = getattr(model, "__func__", model)
    if hasattr(model, "__self__") and getattr(target, "__name__", "") == "_call_impl":
        target = type(model.__self__).forward
    if hasattr(target, "forward") and not hasattr(target, "__code__"):
        target = type(target).forward
    return getattr(target, "__code__", None)


def _entry_file(model):
    code = _entry_code(model)
    return code.co_filename if code else None


def _entry_line(model):
    code = _entry_code(model)
    return code.co_firstlineno if code else None


# --------------------------------------------------------------- log capture


class RecordCollector:
    """A logging handler that keeps the records Dynamo emits for one run."""

    def __init__(self, observation, kind):
        import logging

        class Handler(logging.Handler):
            def emit(self, record):
                observation.add_record(kind, record)

        self.handler = Handler(level=logging.DEBUG)


def attach_log_collectors(torch, observation, trace=True):
    """Collect graph_breaks, recompiles and frame-skip records from every release.

    Loggers are attached directly: their parents differ by release (2.5 has
    `torch._dynamo` with propagate=False, later ones only `torch`). `trace`: the structured trace
    too (a perf run goes without: an enabled trace makes torch render every graph and its code, and
    that cost would be timed as the compile's).
    """
    import logging

    try:
        torch._logging.set_logs(graph_breaks=True, recompiles=True)
    except Exception:
        pass
    for kind in ("graph_breaks", "recompiles"):
        handler = RecordCollector(observation, kind).handler
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and name.endswith(".__" + kind):
                logger.addHandler(handler)
                logger.setLevel(logging.DEBUG)
    # "WON'T CONVERT" (a whole frame falling back to eager) goes to convert_frame at INFO.
    skip_handler = RecordCollector(observation, "convert_frame").handler
    skip_handler.addFilter(lambda record: "WON'T CONVERT" in _safe_message(record))
    convert_logger = logging.getLogger("torch._dynamo.convert_frame")
    convert_logger.addHandler(skip_handler)
    if convert_logger.getEffectiveLevel() > logging.INFO:
        convert_logger.setLevel(logging.INFO)
    if trace:
        attach_trace_collector(observation)


def _safe_message(record):
    try:
        return record.getMessage()
    except Exception:
        return ""


TRACE_KEEP = (
    "dynamo_graph_break_reason",
    "recompile_reasons",
    "compilation_metrics",
    "describe_tensor",
    "dynamo_start",
)


def attach_trace_collector(observation):
    """The structured trace (what tlparse reads), kept in memory, where the release has it."""
    import logging

    events = observation.data["trace_events"]

    class TraceHandler(logging.Handler):
        def emit(self, record):
            metadata = getattr(record, "metadata", None)
            if not isinstance(metadata, dict):
                return
            kind = next((key for key in metadata if key in TRACE_KEEP or key == "artifact"), None)
            if kind is None:
                return
            if kind == "artifact":
                name = (metadata.get("artifact") or {}).get("name")
                if name not in TRACE_KEEP:
                    return
                kind = name
            event = {
                "kind": kind,
                "frame_id": metadata.get("frame_id"),
                "frame_compile_id": metadata.get("frame_compile_id"),
            }
            if kind in ("compilation_metrics", "dynamo_start"):
                event["data"] = _jsonable(metadata.get(kind), 3)
            elif kind == "describe_tensor":
                tensor = metadata.get(kind) or {}
                event["data"] = {
                    k: tensor.get(k) for k in ("id", "ndim", "dtype", "device", "size", "requires_grad") if k in tensor
                }
            payload = getattr(record, "payload", None)
            if payload:
                # PyTorch's own traceback follows the user stack; it is long and says nothing about the user code
                event["payload"] = clip(str(payload).split("\nTraceback (most recent call last):")[0], 8000)
            events.append(event)

    trace_logger = logging.getLogger("torch.__trace")
    trace_logger.addHandler(TraceHandler(level=logging.DEBUG))
    trace_logger.setLevel(logging.DEBUG)
    trace_logger.propagate = False


def _jsonable(value, depth):
    if depth <= 0:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth - 1) for v in value[:50]]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value if not isinstance(value, str) else value[:2000]
    return repr(value)[:200]


def collect_counters(torch):
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return {}
    return {group: {str(k): int(v) for k, v in values.items()} for group, values in counters.items() if values}


def collect_compile_reasons(torch):
    """Dynamo's own list of graph-break reasons with user stacks.

    Before 2.6 a data-dependent branch was never written to the graph_breaks log;
    this list is the only place that break shows up with a location.
    """
    try:
        from torch._dynamo import output_graph
    except Exception:
        return []
    reasons = []
    for reason in getattr(output_graph, "graph_break_reasons", []) or []:
        if not getattr(reason, "graph_break", True):
            continue
        stack = []
        for frame in getattr(reason, "user_stack", None) or []:
            try:
                stack.append(
                    {"file": frame.filename, "line": frame.lineno, "function": frame.name, "source": frame.line or ""}
                )
            except Exception:
                pass
        reasons.append({"reason": clip(str(getattr(reason, "reason", "")), 4000), "stack": stack})
    return reasons


# What a release records of each frame's compile, for perf's phase split (2.13 has the _us fields; 2.5.1 the
# older _s ones) and its structure (guards, cudagraphs, cache hits): taken where the release has them.
COMPILE_PHASE_FIELDS = (
    "backend_compile_time_s",
    "inductor_compile_time_s",
    "code_gen_time_s",
    "dynamo_cumulative_compile_time_us",
    "aot_autograd_cumulative_compile_time_us",
    "inductor_cumulative_compile_time_us",
    "inductor_code_gen_cumulative_compile_time_us",
    "pre_grad_pass_time_us",
    "post_grad_pass_time_us",
    "joint_graph_pass_time_us",
    "triton_compile_time_us",
    "compile_time_autotune_time_us",
    "gc_time_us",
    "guard_latency_us",
    "guard_count",
    "cudagraph_skip_reason",
    "is_runtime",
    "inductor_fx_local_cache_hit_count",
    "inductor_fx_local_cache_miss_count",
    "aotautograd_local_cache_hit_count",
    "aotautograd_local_cache_miss_count",
)


def collect_compilation_metrics(torch):
    try:
        metrics = torch._dynamo.utils.get_compilation_metrics()
    except Exception:
        return []
    kept = []
    for metric in metrics:
        row = metric if isinstance(metric, dict) else getattr(metric, "__dict__", {})
        kept.append(
            {
                key: _jsonable(row.get(key), 2)
                for key in (
                    "co_name",
                    "co_filename",
                    "co_firstlineno",
                    "fail_type",
                    "fail_reason",
                    "fail_user_frame_filename",
                    "fail_user_frame_lineno",
                    "restart_reasons",
                    "entire_frame_compile_time_s",
                    "graph_op_count",
                    "recompile_reason",
                    *COMPILE_PHASE_FIELDS,
                )
                if key in row
            }
        )
    return kept


# ------------------------------------------------------------------- perf

PERF_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
UNAVAILABLE_COUNT = (1 << 64) - 1  # what torch._C._instruction_counter answers on a VM without a PMU


def prepare_perf_run(torch, perf, observation):
    """A perf run's setting, before the script: its compile caches in the job's own folder (emptied before a
    cold run, kept for a warm one), one compile thread, `threads` threads for the timed blocks, and the
    compile-time instruction counter where the CPU exposes one."""
    cache = perf.get("cache_dir")
    if cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
        keep_temp_folder(cache)
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no worker pool: the same compile work on every side
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:  # imported before this run (preloaded): its settings are read already
        for name, value in (("compile_threads", 1), ("fx_graph_cache", True), ("autograd_cache", True)):
            if hasattr(inductor_config, name):
                try:
                    setattr(inductor_config, name, value)
                except Exception:
                    pass
    try:
        torch.set_num_threads(int(perf.get("threads", 1)))
    except Exception:
        pass
    counter = instruction_counter(torch)
    observation.data["instructions"] = counter
    if counter.get("available"):
        try:
            torch._dynamo.config.record_compile_time_instruction_count = True
        except Exception:
            observation.data["instructions"] = {"available": False, "why": "this release cannot count compile time"}


def keep_temp_folder(cache):
    """The run's temp folder inside its compile cache, kept for a warm run as a user's /tmp is kept between
    processes. Inductor keeps more than its cache folder there (torchinductor_<user>: C++ precompiled headers,
    150 MB that take g++ 7 s on 2 cores, and its newer on-disk caches); in a run's own fresh /tmp a warm run
    would rebuild them and time that as its compile (a warm compile of 9 s where the process alone takes 2)."""
    temp = os.path.join(cache, "tmp")
    os.makedirs(temp, exist_ok=True)
    os.environ["TMPDIR"] = temp
    tempfile.tempdir = temp
    codecache = sys.modules.get("torch._inductor.codecache")  # preloaded: its header folder was set at import
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        base = default_cache_dir()
    except Exception:
        base = os.path.join(temp, "torchinductor")
    headers = os.path.join(base, "precompiled_headers")
    setattr(codecache, "_HEADER_DIR", headers)  # noqa: B010 - a private module global, set as torch reads it
    setattr(codecache, "_HEADER_LOCK_DIR", os.path.join(headers, "locks"))  # noqa: B010


def instruction_counter(torch):
    """Whether torch's hardware instruction counter works here: a VM without a PMU answers 2^64-1 (or -1)."""
    counter = getattr(getattr(torch, "_C", None), "_instruction_counter", None)
    if counter is None:
        return {"available": False, "why": f"torch {torch.__version__} has no instruction counter"}
    try:
        handle = counter.start()
        count = counter.end(handle)
    except Exception as error:
        return {"available": False, "why": f"the counter failed: {type(error).__name__}: {error}"[:200]}
    if handle in (-1, UNAVAILABLE_COUNT) or count in (-1, UNAVAILABLE_COUNT):
        return {"available": False, "why": "no hardware instruction counter here (perf_event_open gives none)"}
    return {"available": True}


def compile_instructions(torch):
    """Instructions Dynamo's compile took in this run (where the counter works), else None."""
    try:
        return int(torch._dynamo.utils.CompileTimeInstructionCounter.value())
    except Exception:
        return None


SETTLE_CALLS = 12  # past Dynamo's default recompile limit (8): a frame then runs eagerly, and stays so


def frames_compiled(torch):
    """How many frames Dynamo has converted in this process (a compile or a recompile each); None where the
    release keeps no such count."""
    try:
        return int(torch._dynamo.utils.counters["frames"]["total"])
    except Exception:
        return None


def settle(torch, compiled, args, kwargs, sync):
    """Call the compiled entry point until a call compiles nothing, at most SETTLE_CALLS times: a script
    whose guards fail on every call (a logging call's record, a counter) recompiles until the limit, and
    blocks timed meanwhile would time those compiles (C++ builds in the middle of a block), not the steady
    state. Returns the calls made."""
    seen = frames_compiled(torch)
    if seen is None:
        return 0
    for made in range(1, SETTLE_CALLS + 1):
        compiled(*args, **kwargs)
        sync()
        now = frames_compiled(torch)
        if now == seen:
            return made
        seen = now
    return SETTLE_CALLS


def eager_arm(torch, model, compiled):
    """What the eager blocks call: the compiled entry point under the force_eager stance (2.6+: nested
    compiled calls run eagerly too), else what the script handed torch.compile."""
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is None:
        return model

    def eager(*args, **kwargs):
        with set_stance("force_eager"):
            return compiled(*args, **kwargs)

    return eager


def _synchronizer(torch, values):
    """A CUDA synchronize when any input lives on a GPU (a block's time is the device's too), else nothing."""
    on_gpu = any(getattr(getattr(v, "device", None), "type", "") == "cuda" for v in values)
    return torch.cuda.synchronize if on_gpu else (lambda: None)


class Turns:
    """A perf run's side of the turns casekit gives when it times two targets side by side (casekit.runners.turns):
    it says it is ready, then waits for casekit's go before its script (its compile), and before each timed
    block; it ends each turn with a byte. Casekit opened the two FIFOs' ends in the probe (`open_turns`);
    the run holds only the descriptors. Without turns (None): every wait returns at once."""

    def __init__(self, fds):
        self.go, self.done = fds

    def ready(self):
        self._say(b"r")

    def take(self):
        """Wait for casekit's go; False when casekit gives no more turns (its end closed)."""
        try:
            return bool(os.read(self.go, 1))
        except OSError:
            return False

    def end(self):
        self._say(b"e")

    def _say(self, byte):
        try:
            os.write(self.done, byte)
        except OSError:
            pass  # casekit closed its end: it gives no more turns


class NoTurns:
    def ready(self):
        pass

    def take(self):
        return True

    def end(self):
        pass


def open_turns(perf):
    """The probe's ends of a perf job's turn FIFOs ([go, done], opened before the fork: the run inherits the
    descriptors and never sees the request folder); None without turns or when they cannot be opened."""
    paths = perf.get("turns") if isinstance(perf, dict) else None
    if not isinstance(paths, dict):
        return None
    fds = []
    try:
        for name, flags in (("go", os.O_RDONLY), ("done", os.O_WRONLY)):
            fd = os.open(str(paths[name]), flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            fds.append(fd)
            if not stat_module.S_ISFIFO(os.fstat(fd).st_mode):
                raise OSError("not a FIFO")
            os.set_blocking(fd, True)
        os.write(fds[1], b"o")  # opened: from now on casekit takes the end of the file for the run's end
    except (OSError, KeyError, TypeError):
        for fd in fds:
            os.close(fd)
        return None
    return fds


def measure_steady(torch, interceptor, perf, turns=None):
    """Each compiled entry point's first call made again in timed blocks, eager and compiled in turn (the
    order alternating block by block, so a drift in the machine's speed falls on both): per block, each
    arm's mean time per call over `n` calls, `n` chosen so a block of the slower arm lasts about
    `block_s`. GC is off during the blocks. An entry whose call cannot be made again says why.

    With `turns` (another target's run times its blocks in the same window) the warm-up ends the run's
    first turn (its compile), each block is a turn of its own, and every block's span (monotonic clock) is
    kept: the turns of two runs never overlap."""
    import gc

    turns = turns or NoTurns()
    interceptor.quiet = True
    for handle in interceptor.hook_handles:
        handle.remove()
    blocks, block_s = int(perf.get("blocks", 3)), float(perf.get("block_s", 0.02))
    measured = {}
    settled = {}  # name: the calls made until one compiled nothing
    ready = {}  # name: (arms, args, kwargs, sync, calls per block)
    for name, (model, compiled, args, kwargs) in interceptor.first_calls.items():
        arms = {"compiled": compiled, "eager": eager_arm(torch, model, compiled)}
        try:
            sync = _synchronizer(torch, list(args) + list(kwargs.values()))
            per_call = {}
            settled[name] = settle(torch, compiled, args, kwargs, sync)
            for arm, call in arms.items():  # warm-up, and the estimate of a call's time
                started = time.perf_counter()
                for _ in range(3):
                    call(*args, **kwargs)
                sync()
                per_call[arm] = (time.perf_counter() - started) / 3
            n = max(1, min(100000, int(block_s / max(max(per_call.values()), 1e-7))))
            ready[name] = (arms, args, kwargs, sync, n)
        except Exception as error:
            measured[name] = {"unavailable": clip(f"calling it again raised {type(error).__name__}: {error}", 300)}
    rows = {name: [] for name in ready}  # type: dict
    spans = []
    gc.collect()
    turns.end()  # the compile's turn
    compiled_before = frames_compiled(torch)
    gc.disable()
    try:
        for block in range(blocks if ready else 0):
            if not turns.take():
                break  # casekit gives no more turns: the blocks so far are the run's
            began = time.monotonic()
            for name, (arms, args, kwargs, sync, n) in list(ready.items()):
                try:
                    row = {}
                    for arm in ("eager", "compiled") if block % 2 == 0 else ("compiled", "eager"):
                        call = arms[arm]
                        started = time.perf_counter()
                        for _ in range(n):
                            call(*args, **kwargs)
                        sync()
                        row[arm] = (time.perf_counter() - started) / n
                    rows[name].append(row)
                except Exception as error:
                    del ready[name]
                    measured[name] = {
                        "unavailable": clip(f"calling it again raised {type(error).__name__}: {error}", 300)
                    }
            spans.append([began, time.monotonic()])
            turns.end()
    finally:
        gc.enable()
    compiled_after = frames_compiled(torch)
    turns.take()  # leave when casekit says (after every run's last block): its result is written untimed
    for name, (_arms, _args, _kwargs, _sync, n) in ready.items():
        measured[name] = {"calls_per_block": n, "blocks": rows[name], "settle_calls": settled.get(name, 0)}
    missing = [name for name in interceptor.observation.data["entries"] if name not in interceptor.first_calls]
    for name in missing:
        measured[name] = {"unavailable": "no call of it returned (nothing to call again)"}
    return {
        "threads": torch.get_num_threads(),
        "entries": measured,
        "instructions": compile_instructions(torch),
        "spans": spans,
        # frames Dynamo converted while the blocks ran: none once the entry points settled (see settle)
        "compiled_in_blocks": None if compiled_before is None else compiled_after - compiled_before,
    }


# ------------------------------------------------------------------- one run


def block_network():
    """Refuse non-loopback connections with a clear message: a second layer behind the sandbox."""
    import socket

    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex

    import ipaddress

    def allowed(address):
        # A second layer only (the sandbox's network namespace is the wall): a literal loopback
        # address or "localhost"; never a name such as "127.example.com", which DNS resolves anywhere.
        host = address[0] if isinstance(address, tuple) and address else address
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except (TypeError, ValueError):
            return False

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not allowed(address):
            raise PermissionError(f"casekit: network access is disabled for repro scripts (address {address!r})")
        return original_connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not allowed(address):
            raise PermissionError(f"casekit: network access is disabled for repro scripts (address {address!r})")
        return original_connect_ex(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def seed_everything(torch, seed):
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except Exception:
        pass


def run_script_in_child(torch, job, mode, run_dir, isolation, uid=None):
    """Body of the forked child: run the script once in `mode`, write the observation into run_dir.

    `uid`: the run's own uid (the uid kind of isolation, see run_uid)."""
    import runpy

    os.setsid()  # own process group: a timeout kills whatever the script forked
    cache = (job.get("perf") or {}).get("cache_dir") if mode == "perf" else None
    if isolation:
        enter_isolation(isolation, run_dir, uid, [cache] if cache else [])
    confinement = confine_run() if isolation and isolation.get("confine", True) else "none"
    observation = Observation(mode)
    observation.data["confinement"] = confinement
    result_path = os.path.join(run_dir, RUN_RESULT)
    eager_outputs_path = os.path.join(run_dir, EAGER_OUTPUTS)
    out_fd = os.open(os.path.join(run_dir, RUN_STDOUT), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err_fd = os.open(os.path.join(run_dir, RUN_STDERR), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)

    written: list[bool] = []
    run_pid = os.getpid()  # the script's own process: a child it forks never writes the run's result

    def finish(status, exit_code=None, ended=None):
        if written or os.getpid() != run_pid:
            return
        written.append(True)
        data = observation.data
        data["status"] = status
        data["exit_code"] = exit_code
        data["ended"] = ended or {"by": "end"}  # how the script stopped: ran to its end, or where it exited
        data["wall_s"] = time.time() - data["started"]
        times = os.times()  # a forked child starts from zero: this run's own CPU (under load, wall grows, not this)
        data["cpu_s"] = times.user + times.system + times.children_user + times.children_system
        if mode != "eager":
            data["counters"] = collect_counters(torch)
            data["compilation_metrics"] = collect_compilation_metrics(torch)
            data["compile_reasons"] = collect_compile_reasons(torch)
        for entry in data["entries"].values():
            entry.pop("raw", None)  # live objects, for perf's blocks only
        data["imported_packages"] = imported_package_versions(
            {name.split(".")[0] for name in sys.modules} - baseline_modules
        )
        if job.get("report_modules"):
            data["library_modules"] = library_modules(run_dir)
        if lines_run is not None:
            sys.settrace(None)
            data["lines_run"] = lines_run.report()
            data["callers"] = lines_run.report_callers()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        if mode == "eager" and interceptor.outputs:
            data["outputs_saved"] = save_eager_outputs(torch, interceptor, eager_outputs_path)
        write_json_atomic(result_path, data)

    # os._exit skips every finally block: write what was observed first.
    real_exit = os._exit

    def observed_exit(code=0):
        frame = sys._getframe(1)
        finish("exited" if code else "ok", code, {"by": "os._exit", "at": user_place(frame, script_folder)})
        real_exit(code)

    baseline_modules = {name.split(".")[0] for name in sys.modules} - _PRELOADED_TOP
    eager_outputs = load_eager_outputs(torch, eager_outputs_path) if mode != "eager" else None
    interceptor = CompileInterceptor(
        torch,
        observation,
        mode,
        job.get("backend", "eager"),
        eager_outputs,
        (job.get("rtol", 1e-4), job.get("atol", 1e-5)),
    )
    interceptor.install()
    if mode != "eager":
        torch._dynamo.reset()
        attach_log_collectors(torch, observation, trace=mode != "perf")
    perf = job.get("perf") if mode == "perf" else None
    if perf:
        prepare_perf_run(torch, perf, observation)
    apply_dynamo_config(torch, job_dynamo_config(job))  # the target's settings, before the script's own
    if not job.get("allow_network", False):
        block_network()
    os._exit = observed_exit
    script = job_script_path(job, os.path.dirname(run_dir))
    script_folder = os.path.realpath(run_dir) + os.sep  # the job's files: where a user's exit is placed
    sys.argv = [script] + list(job.get("argv", []))
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    os.chdir(run_dir)  # a folder job (a commit's tree) runs from its root, as the user's command did
    seed_everything(torch, job.get("seed", 0))
    lines_run = None
    if job.get("call_sites"):  # a reducer's: which call made each compiled call (to give it made-up inputs)
        interceptor.call_sites_under = os.path.realpath(os.path.dirname(os.path.abspath(script))) + os.sep
    if mode == "eager" and job.get("trace_lines"):  # a reducer's coverage: never under Dynamo, which owns frames
        lines_run = LineTrace(os.path.dirname(os.path.abspath(script)))
        lines_run.start()
    status, code, ended = "ok", 0, None
    turn_fds = perf.get("turn_fds") if perf else None
    turns = Turns(turn_fds) if turn_fds else NoTurns()
    turns.ready()
    turns.take()  # its compile goes alone: casekit says when (on EOF, casekit gives no turns: it goes on)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        status = "ok" if code == 0 else "exited"
        frames = traceback.walk_tb(stop.__traceback__)
        ended = {"by": "sys.exit", "at": user_place([frame for frame, _ in frames], script_folder)}
    except BaseException as error:
        status, code = "raised", 1
        observation.data["exception"] = describe_exception(error, script)
    if perf and status == "ok":
        observation.data["steady"] = measure_steady(torch, interceptor, perf, turns)
    finish(status, code, ended)
    real_exit(0)


def save_eager_outputs(torch, interceptor, path):
    """The eager run's output tensors (plain tensors only) for the compiled run to compare with, written
    whole or not at all; None when saved, else why not (the compiled run then says it cannot compare)."""
    partial = path + ".partial"
    try:
        torch.save({"outputs": interceptor.outputs, "not_comparable": interceptor.not_comparable}, partial)
        os.replace(partial, path)
        return None
    except Exception as error:
        try:
            os.unlink(partial)
        except OSError:
            pass
        return f"{type(error).__name__}: {clip(str(error), 300)}"


def load_eager_outputs(torch, path):
    """What the eager run saved: {"outputs", "not_comparable"}, or {"unreadable": why} when the file is
    there but cannot be read (never an exception: the script did nothing wrong), or None when absent."""
    if not os.path.exists(path):
        return None
    try:
        try:
            saved = torch.load(path, weights_only=True)  # plain tensors in dicts and lists: no pickled classes
        except TypeError:  # releases before weights_only existed
            saved = torch.load(path)
        if not isinstance(saved, dict) or not isinstance(saved.get("outputs"), dict):
            raise ValueError("not the eager run's outputs")
        return saved
    except Exception as error:
        return {"unreadable": f"the eager outputs could not be read ({type(error).__name__}: {clip(str(error), 200)})"}


def user_place(frames, folder):
    """[file, line] of the innermost frame in the user's folder (`frames`: a frame, walked outwards, or a list
    of frames outermost first); None when no frame is there."""
    if not isinstance(frames, list):
        chain = []  # type: list
        frame = frames
        while frame is not None:
            chain.insert(0, frame)
            frame = frame.f_back
        frames = chain
    for frame in reversed(frames):
        path = os.path.realpath(frame.f_code.co_filename)
        if path.startswith(folder):
            return [frame.f_code.co_filename, frame.f_lineno]
    return None


class LineTrace:
    """The lines run in the files under one folder (the script's and its included files'), by relative
    path: what a reducer may remove at once is what the original never ran. Frames of other files get
    no line tracing (only the call event), so library code runs at nearly its own speed."""

    MAX_FILES = 500

    def __init__(self, root):
        self.prefix = os.path.realpath(root) + os.sep
        self.seen = {}  # co_filename -> set of lines
        self.other = set()  # co_filenames outside the folder
        self.callers = {}  # (co_filename, co_firstlineno) -> {(co_filename, line)}: the nearest caller here

    MAX_CALLERS = 4  # per function: its callers complete a break's call path, which names one

    def start(self):
        seen, other, prefix, callers = self.seen, self.other, self.prefix, self.callers

        def local(frame, event, arg):
            if event == "line":
                seen[frame.f_code.co_filename].add(frame.f_lineno)
            return local

        def on_call(frame, event, arg):
            name = frame.f_code.co_filename
            lines = seen.get(name)
            if lines is None:
                if name in other:
                    return None
                if not os.path.realpath(name).startswith(prefix) or len(seen) >= self.MAX_FILES:
                    other.add(name)
                    return None
                lines = seen[name] = set()
            lines.add(frame.f_lineno)
            # the nearest frame of these files up the stack called it (through nn.Module's __call__)
            mine = callers.setdefault((name, frame.f_code.co_firstlineno), set())
            if len(mine) < self.MAX_CALLERS:
                outer = frame.f_back
                while outer is not None and outer.f_code.co_filename not in seen:
                    outer = outer.f_back
                if outer is not None:
                    mine.add((outer.f_code.co_filename, outer.f_lineno))
            return local

        sys.settrace(on_call)

    def report(self):
        out = {}
        for name, lines in self.seen.items():
            relative = os.path.realpath(name)[len(self.prefix) :].replace(os.sep, "/")
            out[relative] = sorted(lines)
        return out

    def report_callers(self):
        """[callee file, callee's first line, caller file, caller line], by relative path."""

        def relative(name):
            return os.path.realpath(name)[len(self.prefix) :].replace(os.sep, "/")

        return [
            [relative(name), first, relative(outer), line]
            for (name, first), places in self.callers.items()
            for outer, line in sorted(places)
        ]


def describe_exception(error, script):
    frames = traceback.extract_tb(error.__traceback__)
    script_path = os.path.abspath(script)
    user = [f for f in frames if os.path.abspath(f.filename) == script_path]
    location = user[-1] if user else None
    return {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "message": clip(str(error), 12000),
        "script_line": location.lineno if location else None,
        "script_function": location.name if location else None,
        "script_source": (location.line or "") if location else None,
        "frames": [
            {"file": f.filename, "line": f.lineno, "function": f.name, "source": f.line or ""} for f in frames[-12:]
        ],
        "gb_type": getattr(error, "gb_type", None) if isinstance(getattr(error, "gb_type", None), str) else None,
        "lacks": missing_api(error),
    }


def run_one(torch, job, mode, runs_dir, timeout, isolation):
    """Fork a child for one run in a fresh copy of its job folder; turn every way it can end into a status."""
    run_dir = prepare_run_dir(job, runs_dir)
    turn_fds = None
    if mode == "perf":
        job = dict(job, perf=perf_spec(job.get("perf"), runs_dir))
        prepare_perf_cache(job["perf"])
    eager_kept = os.path.join(runs_dir, "{}.{}".format(job["id"], EAGER_OUTPUTS))
    if mode != "eager" and os.path.exists(eager_kept):
        shutil.copyfile(eager_kept, os.path.join(run_dir, EAGER_OUTPUTS))
    uid = run_uid(isolation)
    sys.stdout.flush()
    sys.stderr.flush()
    if uses_run_namespaces(isolation):
        run_namespace()  # the fork below lands in it
    if mode == "perf":  # after the namespace's init was made: only the run may hold them (casekit sees it end)
        turn_fds = open_turns(job["perf"])
        if turn_fds:
            job["perf"]["turn_fds"] = turn_fds
    pid = os.fork()
    if pid == 0:
        try:
            close_pipe_fds()
            run_script_in_child(torch, job, mode, run_dir, isolation, uid)
        except BaseException as error:
            try:
                traceback.print_exc()
                write_json_atomic(os.path.join(run_dir, RUN_RESULT), probe_failure(mode, error))
            finally:
                os._exit(PROBE_FAILED_EXIT)
        os._exit(0)
    for fd in turn_fds or ():
        os.close(fd)  # the run's now: casekit sees its request end, not a descriptor the probe kept
    deadline = time.monotonic() + timeout
    status = None
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            _kill_group(pid)
            os.waitpid(pid, 0)
            status = "timeout"
            break
        wait_for_exit([pid], deadline)
    _kill_group(pid)
    kill_descendants()  # setsid children and double-fork daemons were reparented to us (subreaper) or its init
    release_uid(isolation, uid)
    observation = read_run_result(os.path.join(run_dir, RUN_RESULT))
    if observation is None:  # the child died before writing anything
        observation = Observation(mode).data
        observation["status"] = status or "running"
    if status == "timeout":
        observation["status"] = "timeout"
        observation["timeout_s"] = timeout
    elif status is None and os.WIFSIGNALED(wait_status) and observation["status"] == "running":
        observation["status"] = "killed"
        observation["signal"] = os.WTERMSIG(wait_status)
    elif status is None and observation["status"] == "running":
        observation["status"] = "crashed"
        observation["exit_code"] = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None
    observation["stdout_tail"] = read_tail(os.path.join(run_dir, RUN_STDOUT))
    observation["stderr_tail"] = read_tail(os.path.join(run_dir, RUN_STDERR))
    if mode == "eager":
        copy_regular(os.path.join(run_dir, EAGER_OUTPUTS), eager_kept)
    remove_tree(run_dir)  # the next run must not see this one's files
    return observation


def perf_spec(perf, runs_dir):
    """A perf job's measurement, with its compile cache's folder: beside the requests' run folders (on the runs'
    tmpfs in the sandbox), one per cache key (a job's script on this target), kept across requests."""
    perf = dict(perf or {})
    key = re.sub(r"[^A-Za-z0-9._-]", "_", str(perf.get("cache_key") or "default"))[:120]
    perf["cache_dir"] = os.path.join(os.path.dirname(os.path.abspath(runs_dir)), "perf-cache", key)
    return perf


def prepare_perf_cache(perf):
    """A perf job's compile cache (on the runs' tmpfs, its own): emptied before a cold run, kept for a warm.
    Another script's caches are removed: a session times one script at a time, and each cache holds its own
    precompiled headers (150 MB), more than the tmpfs would hold for a whole archive."""
    cache = perf.get("cache_dir")
    if not cache:
        return
    if perf.get("cache") == "cold":
        remove_tree(cache)
    caches = os.path.dirname(cache)
    if os.path.isdir(caches) and not os.path.islink(caches):  # runs write there: never through a link they made
        for name in os.listdir(caches):
            if name != os.path.basename(cache):
                remove_tree(os.path.join(caches, name))
    os.makedirs(cache, exist_ok=True)


PROBE_FAILED_EXIT = 70  # EX_SOFTWARE: the probe's own code failed around the script, not the script


def probe_failure(mode, error):
    """The result of a run whose failure is the probe's own (its code before or after the script raised; the
    script's own exceptions are caught where it runs): casekit's error, with where in the probe it happened."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.basename(f.filename) == "probe.py"]
    where = f"probe.py:{frames[-1].lineno} in {frames[-1].name}" if frames else "probe.py"
    data = Observation(mode).data
    data["status"] = "probe_failed"
    data["probe_error"] = {"type": type(error).__name__, "message": clip(str(error), 2000), "where": where}
    return data


def prepare_run_dir(job, runs_dir):
    """A fresh, private copy of the job's folder (its script, and any files laid out beside it; a
    commit's whole tree): nothing one run leaves there reaches the next."""
    run_dir = os.path.join(runs_dir, job["id"])
    remove_tree(run_dir)
    shutil.copytree(job["job_dir"], run_dir, symlinks=True)
    if not job.get("tree"):  # a case's inputs are read-only; the folder takes new files (a tree stays a checkout)
        for folder, _dirs, files in os.walk(run_dir):
            for name in files:
                if not os.path.islink(os.path.join(folder, name)):  # a link's target is not ours to change
                    os.chmod(os.path.join(folder, name), 0o444)
    return run_dir


def job_script_path(job, runs_dir):
    """The run's own copy of the script (at its place in the job's folder)."""
    return os.path.join(runs_dir, job["id"], os.path.relpath(job["script"], job["job_dir"]))


def read_run_result(path):
    """The observation a run wrote, or None: a run can lie about itself, not crash the probe."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_RUN_RESULT_BYTES + 1)
        while len(data) <= MAX_RUN_RESULT_BYTES:
            more = os.read(fd, MAX_RUN_RESULT_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    finally:
        os.close(fd)
    if len(data) > MAX_RUN_RESULT_BYTES:
        return _invalid_run(f"its result is over {MAX_RUN_RESULT_BYTES} bytes")
    try:
        observation = json.loads(data.decode("utf-8"))
    except ValueError as error:
        return _invalid_run(f"its result is not valid JSON: {error}")
    if not isinstance(observation, dict) or not isinstance(observation.get("status"), str):
        return _invalid_run("its result is not an observation")
    return observation


def _invalid_run(why):
    observation = Observation("invalid").data
    observation["status"] = "crashed"
    observation["exception"] = {"type": "InvalidResult", "message": why}
    return observation


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(rounds=50):
    """SIGKILL every process below this one, until none is left (a fork loop gets stopped too); but the
    PID 1 of its runs' namespace (the namespace lives as long as this process: see run_namespace)."""
    me = os.getpid()
    spare = run_namespace_init_here()
    for _ in range(rounds):
        found = [pid for pid in _descendant_pids(me) if pid != spare]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.005)


def _reap(statuses=None):
    """Reap every ended child; `statuses` (pid -> wait status) keeps how each ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if statuses is not None:
            statuses[pid] = status


def wait_for_exit(pids, until):
    """Block until one of `pids` (children) may have exited, or the monotonic time `until`.

    Wakes the moment a child exits (a pidfd per child, Linux 5.3+ and Python 3.9+),
    so a 50 ms run is not rounded up to the next tick of a polling loop; where pidfds
    are missing (older kernels, some seccomp profiles) it sleeps WAIT_FALLBACK_S
    instead. The caller reaps with waitpid: this only waits.
    """
    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:  # already gone (a zombie still has a pid): nothing to wait for
                return
            except (AttributeError, OSError):
                fds = _close_all(fds)
                break
        left = until - time.monotonic()
        if left <= 0:
            return
        if not fds:
            time.sleep(min(left, WAIT_FALLBACK_S))
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(1, int(left * 1000)))
    finally:
        _close_all(fds)


def _close_all(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    return []


def _descendant_pids(root):
    children = {}  # type: dict
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                text = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


# ------------------------------------------------------------- run isolation

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _enter_user_namespace(ctypes, libc, with_mounts=True):
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | (CLONE_NEWNS if with_mounts else 0)) != 0:
        raise OSError(ctypes.get_errno(), "unshare: " + os.strerror(ctypes.get_errno()))
    # Gaining the namespace's capabilities made this process non-dumpable, so /proc/self/*_map belong to
    # root outside and an unprivileged uid could not write them; the run is alone in its namespaces.
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open("/proc/self/" + name, "w") as handle:
            handle.write(text)


def _mount(ctypes, libc, source, target, fstype, flags, data=None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {target}: {os.strerror(error)}")


def isolate_run(isolation, run_dir, own=()):
    """Give this run a private view: the batch read-only, other jobs and the results hidden, run_dir (and
    `own`: a perf job's compile cache) writable, a /tmp and /dev/shm of its own (its PID namespace was made
    by its parent: `start_run_namespace`). On the runs' tmpfs (`private`) it sees its own folders only.

    Done in a user namespace of its own, then a second one is entered: the mounts
    made in the first become locked there, so the script cannot undo them.
    """
    ctypes, libc = _libc()
    _enter_user_namespace(ctypes, libc)
    _mount(ctypes, libc, None, "/", None, MS_REC | MS_PRIVATE)
    tmp_size = isolation.get("tmp_size")
    if tmp_size:  # nothing one run leaves in /tmp, HOME or /dev/shm reaches the next (caches, planted modules)
        renew_tmp(ctypes, libc, int(tmp_size), isolation.get("keep_in_tmp", []), isolation.get("hold"))
    mine = [run_dir, *own]
    for folder in isolation.get("private", []):  # every run's folder is there: each sees only its own
        keep_only(ctypes, libc, folder, [path for path in mine if _below(path, folder)], isolation.get("hold"))
    root = isolation["batch_root"]
    _mount(ctypes, libc, root, root, None, MS_BIND | MS_REC)
    _mount(ctypes, libc, None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for folder in isolation.get("readonly", []):  # mounts of their own below the batch (the runs' tmpfs)
        _mount(ctypes, libc, folder, folder, None, MS_BIND | MS_REC)
        _mount(ctypes, libc, None, folder, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for hidden in isolation.get("hide", []):
        _mount(ctypes, libc, "tmpfs", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    for folder in mine:
        _mount(ctypes, libc, folder, folder, None, MS_BIND)
        _mount(ctypes, libc, None, folder, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)  # a bind copies "ro"
    _enter_user_namespace(ctypes, libc)


def _below(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def keep_only(ctypes, libc, folder, kept, hold):
    """Cover `folder` (a tmpfs of many runs' folders) with an empty read-only one, and bind the run's own
    folders in `kept` back at their paths: held outside meanwhile, in `hold`."""
    _mount(ctypes, libc, "tmpfs", hold, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700")
    held = []
    for index, path in enumerate(kept):
        place = os.path.join(hold, str(index))
        os.mkdir(place)
        _mount(ctypes, libc, path, place, None, MS_BIND | MS_REC)
        held.append((place, path))
    _mount(ctypes, libc, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for place, path in held:
        os.makedirs(path, exist_ok=True)
        _mount(ctypes, libc, place, path, None, MS_BIND | MS_REC)
    if libc.umount2(hold.encode(), MNT_DETACH) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"umount {hold}: {os.strerror(error)}")
    _mount(ctypes, libc, None, folder, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755")


def renew_tmp(ctypes, libc, size, keep, hold):
    """A fresh /tmp and /dev/shm for this run; the folders in `keep` (an interpreter's env below /tmp)
    are held outside /tmp meanwhile and bound back at their paths."""
    options = f"size={size},mode=1777"
    held = []
    if keep and hold:
        _mount(ctypes, libc, "tmpfs", hold, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700")
        for index, folder in enumerate(keep):
            place = os.path.join(hold, str(index))
            os.mkdir(place)
            _mount(ctypes, libc, folder, place, None, MS_BIND | MS_REC)
            held.append((place, folder))
    for folder in ("/tmp", "/dev/shm"):
        if os.path.isdir(folder):
            _mount(ctypes, libc, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for place, folder in held:
        os.makedirs(folder, exist_ok=True)
        _mount(ctypes, libc, place, folder, None, MS_BIND | MS_REC)
    if held:
        if libc.umount2(hold.encode(), MNT_DETACH) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"umount {hold}: {os.strerror(error)}")
    home = os.environ.get("HOME")
    if home and home.startswith("/tmp/"):
        os.makedirs(home, exist_ok=True)


def enter_probe_user_namespace():
    """A user namespace of the probe's own (identity-mapped), entered once, before torch starts threads.

    It gives the probe the right to make a PID namespace for each run (`start_run_namespace`); the
    probe can do nothing with it that it could not do before: its files, uid and mounts are the same."""
    ctypes, libc = _libc()
    _enter_user_namespace(ctypes, libc, with_mounts=False)


def uses_run_namespaces(isolation):
    """The namespace kind of isolation gives each worker's runs a PID namespace (the uid kind does not)."""
    return (
        bool(isolation) and isolation.get("kind", "namespace") == "namespace" and isolation.get("pid_namespace", True)
    )


_RUN_INIT = [None, None]  # type: list  # [owner pid, init pid]: PID 1 of the namespace its runs are forked into


def run_namespace():
    """The PID 1 of the PID namespace this process forks its runs into; made on first use.

    Nothing a script does reaches a process outside that namespace: `kill(-1, SIGKILL)` or
    `kill(-1, SIGSTOP)` meet only the run's own processes, never the probe, its workers or the runs
    of other workers (each worker has its namespace; its runs come one after another, and each run's
    processes are killed before the next starts). The script is not PID 1 (signals a PID 1 sends
    itself are dropped, so a script that kills itself would live on): PID 1 is an init forked here
    once, which only reaps. A process may make one such namespace (unshare allows one), so it keeps it."""
    owner, init = _RUN_INIT
    if owner == os.getpid():
        if init is not None and _still_running(init):
            return init
        raise OSError(errno.ESRCH, "the runs' PID namespace lost its init")
    ctypes, libc = _libc()
    if libc.unshare(CLONE_NEWPID) != 0:
        error = ctypes.get_errno()
        raise OSError(error, "unshare(CLONE_NEWPID): " + os.strerror(error))
    sys.stdout.flush()
    sys.stderr.flush()
    init = os.fork()
    if init == 0:
        _serve_as_init()
    _RUN_INIT[:] = [os.getpid(), init]
    return init


def _serve_as_init():
    """PID 1 of the runs' namespace: reap whatever is orphaned there, until killed from outside."""
    try:
        close_pipe_fds()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        while True:
            signal.sigwait({signal.SIGCHLD})
            _reap()
    finally:
        os._exit(0)


def run_namespace_init_here():
    """This process's runs' init, or None (to spare it when killing what a run left)."""
    owner, init = _RUN_INIT
    return init if owner == os.getpid() else None


def enter_isolation(isolation, run_dir, uid, own=()):
    """The run's first step, before anything of the script: the request's kind of isolation.

    "namespace" (the bwrap sandbox): isolate_run. "uid" (a container, where namespaces cannot be
    made): become_run_uid. Everything else about a run is the same for both."""
    if isolation.get("kind", "namespace") == "uid":
        become_run_uid(run_dir, uid)
    else:
        isolate_run(isolation, run_dir, own)


# ------------------------------------------------------------- run confinement

# What a run may not do once its view is made, whatever capabilities its own user namespace gives it:
# make namespaces (a new user namespace hands back every capability: mount a tmpfs of any size, which
# no memory limit counts), mount, reach the kernel's keyrings, BPF, perf or module loading. Numbers per
# architecture: (audit arch, {name: number}, clone, clone3).
CONFINED_SYSCALLS = {
    "x86_64": (
        0xC000003E,
        {"mount": 165, "umount2": 166, "unshare": 272, "setns": 308, "pivot_root": 155, "chroot": 161,
         "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "userfaultfd": 323,
         "perf_event_open": 298, "open_by_handle_at": 304, "name_to_handle_at": 303, "kexec_load": 246,
         "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
         "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
         "mount_setattr": 442, "acct": 163, "swapon": 167, "swapoff": 168, "syslog": 103},
        56,
        435,
    ),
    "aarch64": (
        0xC00000B7,
        {"mount": 40, "umount2": 39, "unshare": 97, "setns": 268, "pivot_root": 41, "chroot": 51,
         "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "userfaultfd": 282,
         "perf_event_open": 241, "open_by_handle_at": 265, "name_to_handle_at": 264, "kexec_load": 104,
         "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
         "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
         "mount_setattr": 442, "acct": 89, "swapon": 224, "swapoff": 225, "syslog": 116},
        220,
        435,
    ),
}  # fmt: skip
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
X32_SYSCALL_BIT = 0x40000000
BPF_LD_W_ABS, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_CAPBSET_DROP = 38, 22, 2, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522


def seccomp_program(machine):
    """The classic-BPF filter for `machine` as (code, jt, jf, k) tuples; None for an architecture not known here.

    Another architecture's calling convention (i386 through int 0x80, x32) is refused whole: its numbers
    differ, so a list of this one's numbers would not hold there. clone3 passes its flags in memory, which
    a filter cannot read: it answers ENOSYS, and libc falls back to clone, whose flags it checks."""
    known = CONFINED_SYSCALLS.get(machine)
    if known is None:
        return None
    arch, numbers, clone, clone3 = known
    deny = (BPF_RET, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)
    program = [(BPF_LD_W_ABS, 0, 0, 4), (BPF_JEQ, 1, 0, arch), deny, (BPF_LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":
        program += [(BPF_JGE, 0, 1, X32_SYSCALL_BIT), deny]
    for number in sorted(set(numbers.values())):
        program += [(BPF_JEQ, 0, 1, number), deny]
    program += [(BPF_JEQ, 0, 1, clone3), (BPF_RET, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    # clone: its first argument's low 32 bits (seccomp_data.args[0] at offset 16) must hold no namespace flag
    program += [(BPF_JEQ, 0, 3, clone), (BPF_LD_W_ABS, 0, 0, 16), (BPF_JSET, 0, 1, NAMESPACE_FLAGS), deny]
    program.append((BPF_RET, 0, 0, SECCOMP_RET_ALLOW))
    return program


def confine_run():
    """The run's last step before the script: no capabilities (bounding and ambient sets too), no new
    privileges, and the seccomp filter above. Returns what holds, for the run's record; a host that
    refuses a step is said there, never fatal (the view and the limits still hold)."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    held = []
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    empty = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits each, all zero
    held.append("no capabilities" if libc.capset(header, empty) == 0 else "capabilities kept (capset refused)")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return ", ".join(held + ["no seccomp (no_new_privs refused)"])
    program = seccomp_program(platform.machine())
    if program is None:
        return ", ".join(held + [f"no seccomp (no syscall table for {platform.machine()})"])
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *step) for step in program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program), ctypes.addressof(code))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return ", ".join(held + [f"no seccomp ({os.strerror(ctypes.get_errno())})"])
    return ", ".join(held + ["seccomp: no namespaces, mounts, keyrings, bpf"])


# ------------------------------------------------------- run isolation by uid (containers)

SHARED_FOLDERS = ("/tmp", "/dev/shm", "/dev/mqueue")  # what every run of a container may write
MAX_SWEEP_DEPTH = 64  # folders of other uids are searched this deep for a run's files
RUN_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


# Each process that forks runs has a slot: 0 the probe, then one per worker it forks, never given twice.
_FORKER_SLOT = [0]  # this process's
_SLOTS_GIVEN = [0]  # the last one the probe gave


def run_uid(isolation, slot=None):
    """The uid of the runs forked by the process in `slot` (this one by default); None unless the uid kind.

    One per slot: no two processes that fork runs share one, and each run is over - its processes
    killed, its files removed (release_uid) - before that process forks the next, so two runs alive
    at once never share a uid. (Not the run's pid: that is free again once reaped, while the run's
    last processes are still being killed.) Small numbers from first_uid: an engine that maps only
    65536 uids into its containers (rootless, userns-remap) has them."""
    if not isolation or isolation.get("kind") != "uid" or not isolation.get("drop", True):
        return None
    return int(isolation.get("first_uid", 20000)) + (_FORKER_SLOT[0] if slot is None else slot)


def become_run_uid(run_dir, uid):
    """Make run_dir this run's own, HOME and TMPDIR in it, then become `uid`: no capability, no group.

    For containers, where isolate_run's namespaces cannot be made (Docker's seccomp profile refuses
    unshare of a user namespace, AppArmor's docker-default refuses mount). The probe is root there with
    a few capabilities; a run is an unprivileged uid of its own, so files and signals keep runs apart:
    it writes only its run dir and the shared /tmp and /dev/shm (swept of its files when it ends),
    and kill(-1) reaches only its own processes. `uid` None: the run keeps the probe's uid (only the
    tests that show what the drop stops ask for that)."""
    home, tmp = os.path.join(run_dir, ".home"), os.path.join(run_dir, ".tmp")
    for folder in (home, tmp):
        os.makedirs(folder, exist_ok=True)
    if uid is not None:
        for folder, dirs, files in os.walk(run_dir):  # its copy of the job: its own, as in a namespace
            for name in dirs + files:
                os.lchown(os.path.join(folder, name), uid, uid)
        os.chmod(run_dir, 0o700)  # the other runs cannot look in (before the chown: then it is not root's)
        os.chown(run_dir, uid, uid)
        os.setgroups([])
        os.setgid(uid)  # as root: real, effective and saved ids, all of them
        os.setuid(uid)  # the capabilities go with root
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
            raise OSError(f"the run did not become uid {uid}")
        try:  # a uid change makes a process non-dumpable: its own /proc/self/fd and environ would be closed to it
            _ctypes, libc = _libc()
            libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    os.environ.update({"HOME": home, "TMPDIR": tmp, "XDG_CACHE_HOME": os.path.join(home, ".cache")})
    tempfile.tempdir = None  # gettempdir() asks TMPDIR again
    for name in RUN_CACHE_VARIABLES:  # torch sets them in the probe, to folders of root's: the run makes its own
        if os.path.exists(os.environ.get(name, "")) and not os.access(os.environ[name], os.W_OK):
            del os.environ[name]


def release_uid(isolation, uid, folders=()):
    """After a run of the uid kind: kill what is left of `uid`, remove what it owns in the shared folders
    (and in `folders`: the runs dir, for a run whose worker was lost)."""
    if uid is None:
        return
    kill_uid(uid)
    sweep_uid(uid, list(isolation.get("shared", SHARED_FOLDERS)) + list(folders))


def kill_uid(uid, rounds=50):
    """SIGKILL every process of `uid` until none is left (the run's uid is the run: nothing else has it)."""
    for _ in range(rounds):
        found = _pids_of_uid(uid)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.005)


def _pids_of_uid(uid):
    """Live (not zombie) processes with `uid` as any of their user ids."""
    found = []  # type: list
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (OSError, ValueError):
            continue
        if fields.get("State", "").strip().startswith("Z"):
            continue
        if str(uid) in fields.get("Uid", "").split():
            found.append(int(entry))
    return found


def sweep_uid(uid, folders):
    """Remove every file and folder `uid` owns below `folders`, links never followed: the next run
    finds nothing of this one (its own folders go whole; other uids' are searched for its files)."""
    for folder in folders:
        pending = [(folder, 0)]
        while pending:
            top, depth = pending.pop()
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for name in names:
                path = os.path.join(top, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if info.st_uid == uid:
                    remove_tree(path)
                elif stat_module.S_ISDIR(info.st_mode) and depth < MAX_SWEEP_DEPTH:
                    pending.append((path, depth + 1))


def guard_probe():
    """Not dumpable (no ptrace, no /proc/<pid>/root or fd of the probe from a script); reap every orphan."""
    try:
        ctypes, libc = _libc()
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: process groups are all there is
        pass


def run_job(torch, job, runs_dir, isolation=None, eager=None):
    """Every run of one job, in order. `eager`: its eager run, already made (see EagerAhead)."""
    timeout = float(job.get("timeout", 300))
    runs = {}
    for mode in job_modes(job):
        if mode == "eager" and eager is not None:
            runs[mode] = eager
        else:
            runs[mode] = run_one(torch, job, mode, runs_dir, timeout, isolation)
        if mode == "eager" and runs[mode]["status"] == "timeout":
            break  # the script hangs without compile: compiled runs would only hang again
        if mode == "eager" and runs[mode]["status"] != "ok" and job.get("eager_must_pass"):
            break  # a reducer's candidate that fails eagerly is refused already: compiling it is wasted
    for kept in (EAGER_OUTPUTS, EAGER_AHEAD):
        try:
            os.unlink(os.path.join(runs_dir, "{}.{}".format(job["id"], kept)))
        except OSError:
            pass
    script = job_script_path(job, runs_dir)
    return {"schema": PROBE_SCHEMA, "job": job["id"], "script": script, "runs": runs}


def warm_up(torch):
    """Trace a tiny function once before forking.

    Dynamo imports much of itself lazily on the first compile (about a second);
    done here, every forked child starts warm. The state it leaves is reset.
    """
    try:

        def tiny(x):
            y = x.sin()
            torch._dynamo.graph_break()
            return y + 1

        compiled = torch.compile(tiny, backend="eager")
        compiled(torch.ones(2))
        compiled(torch.ones(3))
    except Exception:
        pass
    finally:
        try:
            torch._dynamo.reset()
            from torch._dynamo.utils import counters

            counters.clear()
            from torch._dynamo import output_graph

            del output_graph.graph_break_reasons[:]
        except Exception:
            pass


def start_target(env_dir, beside_dynamo=None, run_namespaces=False):
    """Import torch once (the expensive part), record the environment, warm Dynamo up.

    `beside_dynamo(torch)` is called once torch is imported, before Dynamo is: importing
    Dynamo and warming it up take most of a second and a half of one core, which
    work that needs no Dynamo (eager runs) can use. Returns (torch, environment,
    started); None when torch cannot be imported, after writing env_dir/env.json
    with the error (the host reads why from there). `run_namespaces`: each run will get a PID
    namespace, which needs a user namespace of the probe's own, entered now, while this process has
    one thread (unshare refuses a threaded process)."""
    if run_namespaces:
        try:
            enter_probe_user_namespace()
        except OSError as error:
            return _import_failed(env_dir, error, "cannot isolate the runs")
    guard_probe()
    started = time.time()
    try:
        import torch
    except BaseException as error:
        return _import_failed(env_dir, error)
    env = collect_environment_isolated(torch, env_dir)
    package_owners()  # before any fork: every child inherits the answer
    if beside_dynamo is not None:
        beside_dynamo(torch)
    try:
        import torch._dynamo  # noqa: F401
    except BaseException as error:
        return _import_failed(env_dir, error)
    warm_up(torch)
    try:  # should stay False: forked runs could not use CUDA otherwise (recorded to diagnose it)
        env["cuda_initialized_before_fork"] = bool(torch.cuda.is_initialized())
    except Exception:
        pass
    return torch, env, started


def _import_failed(env_dir, error, doing=None):
    said = f"{type(error).__name__}: {error}"
    write_json_atomic(
        os.path.join(env_dir, "env.json"),
        {"schema": PROBE_SCHEMA, "ok": False, "error": f"{doing}: {said}" if doing else said},
    )


def serve(state_dir, requests, run_namespaces=False, first=None):
    """Serve mode: import torch once, then run requests one at a time as they arrive, until end of input.

    Writes STATE_DIR/env.json once (as a batch's env.json: ok or the import
    error). Each line read from `requests` is the path of a request file, the
    same casekit.probe-request/1 a batch takes; its jobs run exactly as in a
    batch (a forked child per run, with the request's runs_dir and isolation,
    from this warm interpreter, which never runs a script itself), then env.json, the results and done.json are written to
    its out_dir -- done.json last, so the caller waits for that one file.
    A bisection over commits asks one request per commit and pays one import.
    `first`: a request given with the start (a replay's batch): its eager runs are made while torch
    imports, on the core that would idle, as a batch's are (EagerAhead).
    """
    os.makedirs(state_dir, exist_ok=True)
    ahead = None
    if first is not None:
        with open(first) as handle:
            request = json.load(handle)
        if request.get("schema") == REQUEST_SCHEMA and _serve_parallel(request) > 1 and len(request["jobs"]) > 1:
            runs_dir = request.get("runs_dir") or os.path.join(request["out_dir"], "runs")
            os.makedirs(runs_dir, exist_ok=True)
            ahead = EagerAhead(request["jobs"], runs_dir, request.get("isolation"))
    target = start_target(state_dir, ahead.start if ahead else None, run_namespaces)  # paid once for every request
    eager_ahead = ahead.finish() if ahead else {}
    if target is None:
        return 3
    torch, env, started = target
    env["dynamo_settings"] = dynamo_settings(torch)
    env_record = {"schema": PROBE_SCHEMA, "ok": True, "environment": env, "import_s": time.time() - started}
    write_json_atomic(os.path.join(state_dir, "env.json"), env_record)
    if first is not None:
        _serve_request(torch, env, env_record, first, eager_ahead)
    for line in requests:
        path = line.strip()
        if path:
            _serve_request(torch, env, env_record, path, {})
    return 0


def _serve_parallel(request):
    # one run at a time unless the request asks for more (a reducer's batch of candidates, a
    # replay's batch: the target's share of its cores, as a batch takes it)
    return runs_at_once(request) if "parallel_runs" in request or request.get("schedule_runs") else 1


def _serve_request(torch, env, env_record, path, eager_ahead):
    begun = time.time()
    with open(path) as handle:
        request = json.load(handle)
    out_dir = request["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    runs_dir = request.get("runs_dir") or os.path.join(out_dir, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    asked = request_dynamo_config(request.get("jobs") or [])
    refused = check_dynamo_config(torch, asked) if request.get("schema") == REQUEST_SCHEMA else None
    if refused:
        write_json_atomic(
            os.path.join(out_dir, "env.json"),
            {"schema": PROBE_SCHEMA, "ok": False, "refused": True, "error": refused},
        )
        write_json_atomic(os.path.join(out_dir, "done.json"), {"schema": PROBE_SCHEMA, "error": refused})
        return
    settings = dict(env, dynamo_settings=dynamo_settings(torch, asked))
    parallel = _serve_parallel(request)
    record = dict(env_record, environment=settings, import_s=0.0, warm=True)
    write_json_atomic(
        os.path.join(out_dir, "env.json"), dict(record, parallel_runs=parallel, eager_runs_ahead=len(eager_ahead))
    )
    if request.get("schema") == REQUEST_SCHEMA:
        preload(request.get("preload"))
        run_batch(torch, request["jobs"], out_dir, runs_dir, request.get("isolation"), parallel, eager_ahead)
    remove_tree(runs_dir)  # the next request's runs start from nothing this one left
    done = {"schema": PROBE_SCHEMA, "wall_s": time.time() - begun}
    if request.get("schema") != REQUEST_SCHEMA:
        done["error"] = "unsupported request schema {!r}".format(request.get("schema"))
    write_json_atomic(os.path.join(out_dir, "done.json"), done)


_MODULE_NAME = None  # type: ignore  # compiled on first use
_PRELOADED_TOP = set()  # type: set  # top-level names imported by preload(): still a run's own packages
MAX_LIBRARY_MODULES = 4000


def preload(names):
    """Import installed modules once in the warm probe, before its runs are forked (a reducer's
    candidates all import the same library: `transformers` costs seconds a run otherwise).

    Only what this interpreter's own path finds is imported: the probe never has a job's folder on
    its path, so a script's own files are never run here. A module that fails to import is skipped
    (the runs import it themselves, and fail as they would)."""
    global _MODULE_NAME
    import importlib
    import re

    if _MODULE_NAME is None:
        _MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    for name in list(names or [])[:MAX_LIBRARY_MODULES]:
        if not isinstance(name, str) or not _MODULE_NAME.match(name) or name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except BaseException:
            continue
        _PRELOADED_TOP.add(name.split(".")[0])


def library_modules(run_dir):
    """The installed modules a run imported (dotted names): what a warm probe may preload for its
    next runs of the same script. Modules of the run's own folder (the script's files) are left out."""
    own = os.path.realpath(run_dir) + os.sep
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or name == "__main__":
            continue
        if os.path.realpath(path).startswith(own):
            continue
        names.append(name)
    return sorted(names)[:MAX_LIBRARY_MODULES]


# ------------------------------------------------------------ run scheduling

JOB_WORKER_MARGIN_S = 60.0  # a worker's own overhead beyond its runs' timeouts (copies, result write)


def runs_at_once(request):
    """How many jobs run at once: the request's number, else this target's share of its cores."""
    if request.get("serial_timings"):
        return 1
    asked = request.get("parallel_runs")
    if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 1:
        return asked
    share = request.get("targets_sharing", 1)
    return default_parallel_runs(available_cpus(), share if isinstance(share, int) and share >= 1 else 1)


def default_parallel_runs(cpus, targets_sharing=1):
    """The cores this target may use, split among the targets running at the same time; at least 1."""
    return max(1, int(cpus) // max(1, int(targets_sharing)))


def available_cpus():
    """Cores this process may run on: its affinity, capped by a cgroup CPU quota (docker --cpus)."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        count = min(count, max(1, int(quota)))  # 1.5 cores run 1 job at full speed, not 2 at 75 %
    return max(1, count)


def cgroup_cpu_quota(root="/sys/fs/cgroup", self_cgroup="/proc/self/cgroup"):
    """The tightest CPU quota (in cores) on this process's cgroup path, v2 or v1; None when unlimited."""
    quotas = []
    try:
        with open(self_cgroup) as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1], parts[2].strip("/")
        if controllers == "":  # v2: cpu.max on each level from ours up to the root
            base, limit = os.path.join(root), _v2_quota
        elif "cpu" in controllers.split(","):
            base, limit = os.path.join(root, controllers), _v1_quota
            if not os.path.isdir(base):
                base = os.path.join(root, "cpu")
        else:
            continue
        pieces = path.split("/") if path else []
        for depth in range(len(pieces), -1, -1):
            quota = limit(os.path.join(base, *pieces[:depth]))
            if quota is not None:
                quotas.append(quota)
    return min(quotas) if quotas else None


def _v2_quota(folder):
    try:
        with open(os.path.join(folder, "cpu.max")) as handle:
            fields = handle.read().split()
        if fields and fields[0] != "max":
            return int(fields[0]) / int(fields[1] if len(fields) > 1 else 100000)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    return None


def _v1_quota(folder):
    try:
        with open(os.path.join(folder, "cpu.cfs_quota_us")) as handle:
            quota = int(handle.read())
        with open(os.path.join(folder, "cpu.cfs_period_us")) as handle:
            period = int(handle.read())
        if quota > 0 and period > 0:
            return quota / period
    except (OSError, ValueError):
        pass
    return None


def result_path(out_dir, job):
    return os.path.join(out_dir, "{}.result.json".format(job["id"]))


def lost_path(out_dir, job):
    """Why a job has no result: its worker died (a run killed it) or overran."""
    return os.path.join(out_dir, "{}.lost.json".format(job["id"]))


def run_batch(torch, jobs, out_dir, runs_dir, isolation, parallel, eager_ahead=None):
    """Every job's result file: one at a time in this process, or up to `parallel` job workers at once.

    `eager_ahead`: job id -> its eager run, made while the probe warmed up."""
    eager_ahead = eager_ahead or {}
    # runs in turns are forked by a job worker each, alone or not, so that every run of a round is forked the
    # same way (in A/A comparisons a target's run, forked by the probe itself, measured a median +2.6 %
    # against the baseline's two, forked by workers: a suspect, not yet shown to be the cause)
    in_turns = any(isinstance(job.get("perf"), dict) and job["perf"].get("turns") for job in jobs)
    if not in_turns and (parallel <= 1 or len(jobs) <= 1):
        for job in jobs:
            result = run_job(torch, job, runs_dir, isolation, eager_ahead.get(job["id"]))
            result["timing_load"] = "serial"
            write_json_atomic(result_path(out_dir, job), result)
        return
    WorkerPool(torch, jobs, out_dir, runs_dir, isolation, parallel, eager_ahead).run()
    kill_descendants()


def job_modes(job):
    return [m for m in job.get("modes", ["eager", "compiled"]) if m in RUN_MODES]


def job_worker_limit(job):
    return float(job.get("timeout", 300)) * max(1, len(job_modes(job))) + JOB_WORKER_MARGIN_S


# The pipes between the probe and its workers: a forked process that is not their owner closes
# them first thing (a worker closes the others' ends, a run closes its worker's), so a script can
# neither hand a worker a job nor report one done.
_PIPE_FDS = []  # type: list


def close_pipe_fds(keep=()):
    for fd in _PIPE_FDS:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    _PIPE_FDS[:] = [fd for fd in _PIPE_FDS if fd in keep]


def fork_worker(body):
    """Fork a worker that runs `body(inbox, outbox)` (the read end of a pipe from the probe, the write
    end of one to it), then kills whatever it left behind and exits. Returns (pid, the probe's end
    to write to it, the probe's end to read from it, its slot: see run_uid).

    A worker is a child subreaper: a run's double-fork daemon is reparented to it, and
    is killed when that run ends; and it dies with the probe (PR_SET_PDEATHSIG).
    """
    inbox, to_worker = os.pipe()
    from_worker, outbox = os.pipe()
    _SLOTS_GIVEN[0] += 1
    slot = _SLOTS_GIVEN[0]
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        os.close(inbox)
        os.close(outbox)
        _PIPE_FDS.extend([to_worker, from_worker])
        return pid, to_worker, from_worker, slot
    _FORKER_SLOT[0] = slot
    code = 0
    try:
        close_pipe_fds(keep=(inbox, outbox))
        os.close(to_worker)
        os.close(from_worker)
        _PIPE_FDS[:] = [inbox, outbox]
        try:
            _ctypes, libc = _libc()
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the probe killed: its workers go too
        except (OSError, AttributeError):
            pass
        body(inbox, outbox)
    except BaseException:
        code = 70
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        try:
            kill_descendants()
        finally:
            os._exit(code)
    return pid, to_worker, from_worker, slot  # not reached


class WorkerPool:
    """Up to `parallel` workers, forked once from the warm probe, each running one job at a time.

    A run's double-fork daemon is reparented to the worker that ran it (see fork_worker)
    and is killed when that run ends, never touching the jobs running beside it.
    Workers are kept from job to job: forking and tearing down a process that holds
    torch costs 7-17 ms, paid once per worker rather than once per job.
    A worker that dies (a script killed it) or overruns loses only the job it held: a
    record of why is written for it, and a new worker takes the jobs still waiting.
    """

    def __init__(self, torch, jobs, out_dir, runs_dir, isolation, parallel, eager_ahead):
        self.torch, self.jobs, self.out_dir = torch, jobs, out_dir
        self.runs_dir, self.isolation, self.parallel = runs_dir, isolation, parallel
        self.eager_ahead = eager_ahead
        self.idle = []  # type: list
        self.busy = {}  # type: dict  # done-pipe fd -> [pid, task fd, done fd, job index, deadline, slot]
        self.ended = {}  # type: dict  # worker pid -> wait status, once reaped

    def run(self):
        pending = list(range(len(self.jobs)))
        try:
            while pending or self.busy:
                while pending and (self.idle or len(self.busy) < self.parallel):
                    worker = self.idle.pop() if self.idle else self._start()
                    index = pending[0]
                    try:
                        os.write(worker[1], b"%d\n" % index)
                    except OSError:  # an idle worker died: a new one takes the job
                        self._close(worker)
                        self._reap()
                        continue
                    pending.pop(0)
                    worker[3], worker[4] = index, time.monotonic() + job_worker_limit(self.jobs[index])
                    self.busy[worker[2]] = worker
                self._wait()
        finally:
            for worker in self.idle + list(self.busy.values()):
                self._close(worker)  # a worker reading its task pipe sees the end and exits
            for worker in self.idle + list(self.busy.values()):
                if worker[0] not in self.ended:
                    wait_for_exit([worker[0]], time.monotonic() + 2.0)
                    if _still_running(worker[0]):  # busy when something went wrong here: stop it
                        _kill_tree(worker[0])
                    _wait_quietly(worker[0])

    def _start(self):
        pid, tasks, done, slot = fork_worker(self._serve)
        return [pid, tasks, done, None, None, slot]

    def _serve(self, tasks, done):
        """The worker: a job index per line until the probe closes the pipe."""
        for line in _lines(tasks):
            job = self.jobs[int(line)]
            result = run_job(self.torch, job, self.runs_dir, self.isolation, self.eager_ahead.get(job["id"]))
            result["timing_load"] = f"parallel:{self.parallel}"
            write_json_atomic(result_path(self.out_dir, job), result)
            kill_descendants()
            os.write(done, line + b"\n")

    def _wait(self):
        """Until a worker reports (or dies), or the nearest deadline; then deal with what happened."""
        now = time.monotonic()
        nearest = min(worker[4] for worker in self.busy.values())
        poller = select.poll()
        for fd in self.busy:
            poller.register(fd, select.POLLIN | select.POLLHUP)
        ready = poller.poll(max(1, int(min(nearest - now, 1.0) * 1000)))
        for fd, _event in ready:
            worker = self.busy.pop(fd)
            reply = _read_reply(fd)
            if reply == worker[3]:
                self.idle.append(worker)
            else:  # the pipe ended: a run killed its worker
                self._lose(worker, self._end_of(worker[0]))
        for worker in [w for w in self.busy.values() if time.monotonic() > w[4]]:
            del self.busy[worker[2]]
            limit = job_worker_limit(self.jobs[worker[3]])
            self._lose(worker, f"stopped after {limit:g} s, past its runs' timeouts")
        self._reap()

    def _reap(self):
        """Reap every ended child: workers (their status kept) and orphans reparented to the probe."""
        _reap(self.ended)

    def _end_of(self, pid):
        """How a worker ended (waiting for it: its pipe can end a moment before it does)."""
        if pid not in self.ended:
            try:
                self.ended[pid] = os.waitpid(pid, 0)[1]
            except ChildProcessError:
                return "ended"
        status = self.ended[pid]
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit status {os.WEXITSTATUS(status) if os.WIFEXITED(status) else status}"

    def _lose(self, worker, why):
        if worker[0] not in self.ended:
            _kill_tree(worker[0])
            _wait_quietly(worker[0])
            self.ended[worker[0]] = None
        self._close(worker)
        job = self.jobs[worker[3]]
        if not os.path.exists(result_path(self.out_dir, job)):  # say so, not "never ran"
            write_json_atomic(lost_path(self.out_dir, job), {"schema": PROBE_SCHEMA, "job": job["id"], "why": why})
        kill_strays({w[0] for w in self.idle + list(self.busy.values())})
        release_uid(self.isolation, run_uid(self.isolation, worker[5]), [self.runs_dir])  # its run, cut short

    @staticmethod
    def _close(worker):
        for fd in worker[1:3]:
            try:
                os.close(fd)
            except OSError:
                pass
            if fd in _PIPE_FDS:
                _PIPE_FDS.remove(fd)


class EagerAhead:
    """Eager runs made while the probe imports Dynamo and warms it up, on a core that would idle otherwise.

    An eager run never enters Dynamo (torch.compile is taken out), so it needs neither:
    a worker forked once torch is imported runs the jobs' eager runs in order, each as
    `run_one` makes it, and reports each one done. When the warm-up ends, the worker is
    told to stop; the run it is in gets a moment to end, then it is killed and that
    job's eager run is made again later, with the rest. Only with parallel runs: one
    at a time, there is no idle core to use.
    """

    GRACE_S = 0.2  # how long a run under way may take to end once the warm-up is done

    def __init__(self, jobs, runs_dir, isolation):
        self.jobs, self.runs_dir, self.isolation = jobs, runs_dir, isolation
        self.pid = None

    def start(self, torch):
        self.pid, self.stop, self.done, self.slot = fork_worker(lambda stop, done: self._serve(torch, stop, done))

    def _serve(self, torch, stop, done):
        told = select.poll()
        told.register(stop, select.POLLIN | select.POLLHUP)
        for index, job in enumerate(self.jobs):
            if told.poll(0):  # the warm-up is done: the pool takes it from here
                return
            if "eager" not in job_modes(job):
                continue
            timeout = float(job.get("timeout", 300))
            observation = run_one(torch, job, "eager", self.runs_dir, timeout, self.isolation)
            write_json_atomic(os.path.join(self.runs_dir, "{}.{}".format(job["id"], EAGER_AHEAD)), observation)
            os.write(done, b"%d\n" % index)

    def finish(self):
        """Stop the worker; job id -> the eager runs it made."""
        if self.pid is None:
            return {}
        os.close(self.stop)
        wait_for_exit([self.pid], time.monotonic() + self.GRACE_S)
        # The worker and everything below it, orphans included (a worker that died left its run's
        # processes to the probe). Nothing else runs yet: the workers are forked after this.
        kill_descendants()
        _reap()  # the worker, if it ended by itself (kill_descendants leaves zombies alone)
        release_uid(self.isolation, run_uid(self.isolation, self.slot), [self.runs_dir])  # a run cut short
        finished = [int(line) for line in _lines(self.done) if line.isdigit()]
        os.close(self.done)
        _PIPE_FDS[:] = [fd for fd in _PIPE_FDS if fd not in (self.stop, self.done)]
        made = {}
        for index in finished:
            job = self.jobs[index]
            observation = read_run_result(os.path.join(self.runs_dir, "{}.{}".format(job["id"], EAGER_AHEAD)))
            if observation is not None and observation.get("mode") == "eager":
                made[job["id"]] = observation
        return made


def _lines(fd):
    """The lines written to a pipe, as they come, until its end."""
    pending = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line


def _read_reply(fd):
    """A worker's "done" (the job index it finished), or None when its pipe ended."""
    try:
        data = os.read(fd, 64)
        return int(data.split(b"\n", 1)[0]) if data else None
    except (OSError, ValueError):
        return None


def _still_running(pid):
    """True while the child `pid` has not ended (it is reaped here if it has)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False


def _wait_quietly(pid):
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _kill_tree(pid):
    for below in _descendant_pids(pid):
        try:
            os.kill(below, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def kill_strays(keep):
    """Kill the probe's children that are not running workers (a killed worker's orphans), and below; but
    the PID 1 of the probe's own runs' namespace (see run_namespace: with it gone, no run of the probe's
    could be made again, and the probe died at its next run alone)."""
    spare = run_namespace_init_here()
    for _ in range(50):
        strays = [pid for pid in _child_pids(os.getpid()) if pid not in keep and pid != spare]
        if not strays:
            return
        for pid in strays:
            _kill_tree(pid)
        for pid in strays:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.005)


def _child_pids(root):
    return [pid for pid in _descendant_pids(root) if _parent_pid(pid) == root]


def _parent_pid(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
        return int(text[text.rfind(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def main(argv):
    if len(argv) >= 3 and argv[1] == "--serve":  # [--isolated] [--first REQUEST]: see serve()
        flags = argv[3:]
        first = flags[flags.index("--first") + 1] if "--first" in flags[:-1] else None
        return serve(argv[2], sys.stdin, run_namespaces="--isolated" in flags, first=first)
    if len(argv) != 2:
        sys.stderr.write("usage: probe.py REQUEST.json | probe.py --serve STATE_DIR [--isolated] [--first REQUEST]\n")
        return 2
    with open(argv[1]) as handle:
        request = json.load(handle)
    if request.get("schema") != REQUEST_SCHEMA:
        sys.stderr.write("probe: unsupported request schema {!r}\n".format(request.get("schema")))
        return 2
    out_dir = request["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    runs_dir = request.get("runs_dir") or os.path.join(out_dir, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    isolation = request.get("isolation")
    parallel = runs_at_once(request)
    ahead = EagerAhead(request["jobs"], runs_dir, isolation) if parallel > 1 and len(request["jobs"]) > 1 else None
    run_namespaces = uses_run_namespaces(isolation)
    target = start_target(out_dir, ahead.start if ahead else None, run_namespaces)
    eager_ahead = ahead.finish() if ahead else {}
    if target is None:
        return 3
    torch, env, started = target
    asked = request_dynamo_config(request["jobs"])
    refused = check_dynamo_config(torch, asked)
    if refused:  # the whole target: every script would run with settings this release does not have
        write_json_atomic(
            os.path.join(out_dir, "env.json"), {"schema": PROBE_SCHEMA, "ok": False, "refused": True, "error": refused}
        )
        return 3
    env["dynamo_settings"] = dynamo_settings(torch, asked)
    env_record = {
        "schema": PROBE_SCHEMA,
        "ok": True,
        "environment": env,
        "import_s": time.time() - started,
        "parallel_runs": parallel,
        "eager_runs_ahead": len(eager_ahead),
    }
    write_json_atomic(os.path.join(out_dir, "env.json"), env_record)
    run_batch(torch, request["jobs"], out_dir, runs_dir, isolation, parallel, eager_ahead)
    write_json_atomic(os.path.join(out_dir, "done.json"), {"schema": PROBE_SCHEMA, "wall_s": time.time() - started})
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    # Everything is written (results, done.json). Tearing down an interpreter that holds torch
    # takes most of a second; nothing is left for it to do, so skip it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
