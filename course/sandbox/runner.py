"""The program that runs *inside* the sandbox, next to the student's code.

It is handed to the interpreter as text (`python -I -c ...`), so it imports nothing of the course
package: only the standard library and IPython. It reads one JSON request on stdin, runs each cell with
IPython, and reports on the channel fd (argv[1]) one JSON line per event. Everything it reports is a
claim made from inside the student's process: the grader validates it as untrusted plain data.
"""

import ast as _ast
import contextlib
import gc
import json
import math
import os
import signal
import sys
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

# Captured before any student code runs, so that replacing builtins or module attributes in a
# notebook does not change how answers are encoded and reported.
_write, _type, _callable, _isfinite, _len, _str = os.write, type, callable, math.isfinite, len, str
_float_repr, _int_repr, _BaseException, _TypeError = float.__repr__, int.__repr__, BaseException, TypeError
_list, _dict, _float, _int, _bool, _tuple = list, dict, float, int, bool, tuple
_NotImplementedError, _all, _zip = NotImplementedError, all, zip
_UNBOUND = object()  # an answer name the notebook has not defined
_NOT_KEPT = object()  # in place of an object the harvester does not keep (its identity is never used)
# Types whose objects never change: a name bound to the same one as before has the same answer (_Harvester).
_UNCHANGING = (float, int, bool, str, type(None), type(...), type(lambda: None), object)
_MAX_LIST = 1000
_PR_SET_NO_NEW_PRIVS = 38
_MAX_TEXT = 1000


def _encode(value):
    """JSON text of plain data, using only the references captured above."""
    kind = _type(value)
    if kind is _dict:
        return "{" + ",".join(_quote(key) + ":" + _encode(item) for key, item in value.items()) + "}"
    if kind is _list:
        return "[" + ",".join(_encode(item) for item in value) + "]"
    if kind is _str:
        return _quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is _int:
        return _int_repr(value)
    if kind is _float:
        return _float_repr(value)
    raise _TypeError(kind)


def _same(first, second):
    """Whether two harvests are the same plain data, each value's exact type included: `==` alone takes 1, 1.0 and
    True (or 0.0 and -0.0) for one another, and the grader tells them apart (True is no number, 1 is no bool)."""
    kind = _type(first)
    if kind is not _type(second):
        return False
    if kind is _dict:
        return _len(first) == _len(second) and _all(
            key in second and _same(item, second[key]) for key, item in first.items()
        )
    if kind is _list:
        return _len(first) == _len(second) and _all(_same(a, b) for a, b in _zip(first, second))
    if kind is _float:
        return _float_repr(first) == _float_repr(second)
    return first == second


def _send(fd, event):
    try:
        _write(fd, (_encode(event) + "\n").encode())
    except _BaseException:
        pass


def _scalar(value):
    """A JSON-safe copy of a plain scalar of an exact plain type; raises TypeError otherwise."""
    kind = _type(value)
    if kind is _float:
        if _isfinite(value):
            return value
        return {"nonfinite": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if kind is _str:
        return value[:_MAX_TEXT]
    if kind is _int:
        if -(2**63) <= value <= 2**63:
            return value
        raise _TypeError(kind)
    if kind is _bool or value is None:
        return value
    raise _TypeError(kind)


def _describe(value):
    try:
        return _str(_type(value).__qualname__)[:100]
    except _BaseException:
        return "unknown"


class _Harvester:
    """Reads the answer names after each cell and returns those whose answer changed since the last report. A
    function answer is called at the grader's points as soon as it is defined (and again whenever it is
    redefined), so a later crash cannot lose its results.

    A name still bound to the very object it was bound to at the last look, where that object cannot change
    (an exact float, int, bool, str, None, `...`, a plain function), or still unbound, has the answer it had: it
    is not read again. Anything else (a list, a tensor, an object of any other type) is read and compared value
    and type by value and type (_same)."""

    def __init__(self, names, functions, call_seconds):
        self.names, self.functions, self.call_seconds = names, functions, call_seconds
        self.probed = {}  # name -> (function object, results, why it is unfinished or "")
        self.reported = {}  # name -> (the object looked at if it cannot change, else _NOT_KEPT; its last answer)

    def changes(self, namespace):
        changed = {}
        for name in self.names:
            value = namespace[name] if name in namespace else _UNBOUND
            last = self.reported.get(name)
            if last is not None and last[0] is value:
                continue
            answer = self._answer(namespace, name)
            if last is None or not _same(answer, last[1]):
                changed[name] = answer
            # The object is held (so that its identity cannot pass to another) only where it cannot change; any
            # other (a list, a tensor and its graph) is neither kept alive nor taken as unchanged.
            self.reported[name] = (value if _unchanging(_type(value)) else _NOT_KEPT, answer)
        return changed

    def _answer(self, namespace, name):
        answer = _harvest_one(namespace, name, self.functions)
        if answer.get("kind") == "function":
            function = namespace[name]
            seen = self.probed.get(name)
            if seen is None or seen[0] is not function:
                seen = (function, *_probe(function, self.functions[name], self.call_seconds))
                self.probed[name] = seen
            # A function still as released (every call returns `...` or raises NotImplementedError) is
            # no answer yet, said in the words of a value still `...`.
            answer = {"kind": "missing", "detail": seen[2]} if seen[2] else {**answer, "probes": seen[1]}
        return answer


def _unchanging(kind):
    """Whether objects of exactly this type never change (by identity: no student's class is asked anything)."""
    for plain in _UNCHANGING:
        if kind is plain:
            return True
    return False


def _harvest_one(namespace, name, function_names):
    if name not in namespace:
        return {"kind": "missing", "detail": "not defined"}
    value = namespace[name]
    if value is Ellipsis:
        return {"kind": "missing", "detail": "still `...`"}
    if name in function_names:
        return {"kind": "function"} if _callable(value) else {"kind": "wrong_form", "type": _describe(value)}
    try:
        if _type(value) is _list:
            if _len(value) > _MAX_LIST:
                return {"kind": "wrong_form", "type": "list of more than 1000 items"}
            return {"kind": "value", "value": [_scalar(item) for item in _list.__iter__(value)]}
        return {"kind": "value", "value": _scalar(value)}
    except _BaseException:
        return {"kind": "wrong_form", "type": _describe(value)}


class _CallTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _CallTimeout()


def _probe(function, points, seconds):
    """The function's result at each point, and why it is unfinished ("" unless every call is the template's)."""
    results, unfinished = [], []
    for x in points:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            value = function(x)
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                results.append({"x": x, "value": _scalar(value)})
            except TypeError:
                said = (
                    "`...` (replace `return ...` with your derivative)"
                    if value is ...
                    else f"a value of type {_describe(value)}"
                )
                results.append({"x": x, "error": f"returned {said}, not a plain number"})
                unfinished.append("still `...`" if value is ... else "")
        except _CallTimeout:
            results.append({"x": x, "error": f"did not return within {seconds:g} s"})
        except BaseException as error:
            signal.setitimer(signal.ITIMER_REAL, 0)
            results.append({"x": x, "error": f"raised {_describe(error)}"})
            unfinished.append("still raises NotImplementedError" if _type(error) is _NotImplementedError else "")
    whole = _len(unfinished) == _len(results) > 0 and _all(unfinished)
    return results, (unfinished[0] if whole else "")


def _error_text(result):
    error = result.error_before_exec or result.error_in_exec
    if error is None:
        return None
    try:
        text = f"{type(error).__name__}: {error}"
    except BaseException:
        text = _describe(error)
    return text[:500]


def _flush():
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except _BaseException:
            pass


def _stdin_from_devnull():
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(os.devnull)


def run_cell(shell, source):
    """Run one cell as IPython's `shell.run_cell(source, store_history=False)` does, and return its
    ExecutionResult; without IPython's per-cell overhead when the cell is plain Python.

    IPython's transformers (magics, `!` commands, `?` help, pasted prompts, a cell magic) only ever change
    text that is not valid Python, or that starts with prompts or indentation, and `await` at the top level
    does not compile as plain Python: such a cell, or one that does not compile, goes to IPython's own
    run_cell, which reports its errors as a notebook would. A plain cell is compiled once (IPython compiles
    each statement apart, and every cell twice more to find out whether it is async) and run through the
    shell's own `run_code`, with the same builtins, display hook for the last expression, events,
    `__future__` flags, traceback display and error reporting. A cell the worker compiled before it forked
    (_precompile: the released notebook's own cells) is not compiled again while the shell compiles as it did
    then."""
    if not source or source.isspace():
        return shell.run_cell(source, store_history=False)
    compiled = _PRECOMPILED.get(source)
    try:
        if compiled is not None and compiled[0] != _compiling_state(shell):
            compiled = None
    except Exception:  # a notebook that took the shell apart: compiled as below, or run by IPython
        compiled = None
    if compiled is None:
        compiled = _compile_cell(shell, source)
    else:
        with contextlib.suppress(Exception):  # its text for tracebacks, as compiling it here would have cached it
            shell.compile.cache(compiled[1], shell.execution_count, raw_code=source)
    if compiled is None:  # outside any handler: the cell must not run with our exception as its current one
        return shell.run_cell(source, store_history=False)
    _, text, codes = compiled
    info = _ExecutionInfo(source, False, False, True, None, None, transformed_cell=text)
    result = _ExecutionResult(info)
    result.execution_count = shell.execution_count
    try:
        shell.events.trigger("pre_execute")
        shell.events.trigger("pre_run_cell", info)
        with shell.builtin_trap, shell.display_trap:
            shell.displayhook.exec_result = result
            raised = False
            for code in codes:
                if _pseudo_sync_runner(shell.run_code(code, result)):
                    raised = True
                    break
            shell.last_execution_succeeded = not raised
            shell.last_execution_result = result
            shell.displayhook.exec_result = None
    finally:
        shell.events.trigger("post_execute")
        shell.events.trigger("post_run_cell", result)
    return result


def _compiling_state(shell):
    """What a cell's compiled code depends on besides its text: the `__future__` flags so far, IPython's input
    transformers and how it runs a cell's statements."""
    manager = shell.input_transformer_manager
    return (
        shell.compile.flags,
        _tuple(manager.cleanup_transforms),
        _tuple(manager.line_transforms),
        _tuple(shell.ast_transformers),
        _tuple(shell.input_transformers_post),
        shell.ast_node_interactivity,
        shell.execution_count,
    )


def _compile_cell(shell, source):
    """(the compiling state before, the text IPython runs, its code objects) for a plain-Python cell; None for a
    cell that IPython would change or run otherwise, or that does not compile (IPython's run_cell then)."""
    compiler = shell.compile
    flags = compiler.flags
    text = source if source.endswith("\n") else source + "\n"
    try:
        state = _compiling_state(shell)
        _, cleanup, line, ast_transformers, post, interactivity, count = state
        lines = text.splitlines(keepends=True)
        for transform in cleanup + line:
            lines = transform(lines)
        if "".join(lines) != text or ast_transformers or post or interactivity != "last_expr":
            raise ValueError("IPython would change this cell, or run it otherwise")
        cell_name = compiler.cache(text, count, raw_code=source)
        tree = compiler.ast_parse(text, filename=cell_name)  # a SyntaxWarning names the cell, as in IPython
        body = tree.body
        if (
            body
            and _type(body[0]) is _ast.Expr
            and _type(body[0].value) is _ast.Constant
            and _type(body[0].value.value) is _str
        ):
            raise ValueError("a leading string would be a docstring here, an expression in IPython")
        last = body[-1:] if body and _type(body[-1]) is _ast.Expr else []
        codes = []
        if body[: _len(body) - _len(last)]:
            codes.append(compiler(_ast.Module(body[: _len(body) - _len(last)], []), cell_name, "exec"))
        if last:
            codes.append(compiler(_ast.Interactive(last), cell_name, "single"))
    except Exception:
        compiler.flags = flags  # a `from __future__` of a statement before the one that failed
        return None
    return state, text, _tuple(codes)


# The released notebook's cells as the worker compiled them before it forked (_precompile): source -> what
# _compile_cell made of it. Filled in the worker only, before any submission is seen.
_PRECOMPILED = {}


def _precompile(shell, sources):
    """Compile (never run) the cells every student's notebook holds as released, once in the worker, so that a
    child runs those of its cells that are still as released without compiling them. A cell whose compiling
    changes the shell's `__future__` flags is left out (and the flags put back): later cells must compile as
    they would in the child; so is one that warns as it compiles (a SyntaxWarning belongs in each run's output).
    Only public text comes here: what the worker holds, each child can read."""
    import warnings

    for source in sources:
        if _type(source) is not _str or not source or source.isspace() or source in _PRECOMPILED:
            continue
        flags = shell.compile.flags
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            compiled = _compile_cell(shell, source)
        if shell.compile.flags != flags:
            shell.compile.flags = flags
        elif compiled is not None and not warned:  # a cell that warns as it compiles warns in each run, as before
            _PRECOMPILED[source] = compiled


# IPython's, bound by _new_shell (before any student code runs)
_ExecutionInfo: Any = None
_ExecutionResult: Any = None
_pseudo_sync_runner: Any = None


def _new_shell():
    global _ExecutionInfo, _ExecutionResult, _pseudo_sync_runner
    from IPython.core.async_helpers import _pseudo_sync_runner
    from IPython.core.interactiveshell import ExecutionInfo as _ExecutionInfo
    from IPython.core.interactiveshell import ExecutionResult as _ExecutionResult
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Plain"
    return InteractiveShell.instance(config=config)


def _set_rlimits(rlimits):
    """The run's rlimits ({name: [soft, hard]}, course/sandbox/limits.py), set by this process on itself before
    anything else: the grader starts a cold run with no Python of its own in the forked child (a `preexec_fn` can
    deadlock a grader whose other threads are importing or logging at that moment)."""
    import resource

    for name, (soft, hard) in rlimits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))


def main():
    """Cold start: the request on stdin, the channel fd in argv[1], the run's rlimits as JSON in argv[2]. Limited and
    filtered first, then torch and the shell, as a warm worker has them, while the grader still reads the notebook
    (it writes the request after)."""
    channel = int(sys.argv[1])
    _set_rlimits(json.loads(sys.argv[2]))
    confined = confine()
    gc.disable()  # the collector would rescan every object of torch's import as it grows: a tenth of its time
    with contextlib.suppress(Exception):  # a torch that cannot load here: the notebook's own import says why
        import torch  # noqa: F401 - what nearly every notebook imports first
    shell = _new_shell()
    gc.freeze()
    gc.enable()
    request = json.loads(sys.stdin.readline())

    def go():
        sys.stdin.read()  # the grader closes the pipe once it has taken the run's measure at `ready`
        _stdin_from_devnull()

    run_request(request, channel, shell, confined=confined, go=go)


def run_request(request, channel, shell=None, *, confined, preloaded=(), go=None):
    """Run the cells of one submission, reporting on the channel; never returns.

    `preloaded`: the sources of the grader's cells a warm worker already ran in `shell` before it forked
    (see serve); the request's first cells, while their text is exactly those, are not run again.
    `go`: waits, after `ready`, until the grader has taken the run's measure at `ready` (the end of the request's
    pipe): no cell runs before it, so what the first cell allocates is never counted as the start's.

    `ready` is the only message sent before student code runs, so it is the only one the grader can
    believe; every later message is checked by the grader as a claim of the student's process."""
    shell = shell or _new_shell()
    harvester = _Harvester(request["answers"], request["functions"], request["call_seconds"])
    _send(channel, {"event": "ready", "confined": confined})
    if go is not None:
        go()

    # An event carries only the answers that changed since the last one sent (_Harvester.changes): the grader
    # keeps the last reported answer of each name, so a run that ends early is graded on what it had reported.
    ahead = _len(preloaded)  # how many of the first cells may still be ones the worker ran
    for position, cell in enumerate(request["cells"]):
        if position < ahead and cell["source"] == preloaded[position]:
            error = None  # it ran without error in the worker (see _preload), and this process is its copy
        else:
            ahead = 0
            try:
                result = run_cell(shell, cell["source"])
                error = _error_text(result)
            except BaseException as escaped:  # SystemExit or KeyboardInterrupt raised past IPython
                error = f"{_describe(escaped)} ended the cell"
        _flush()
        event = {"event": "done", "cell": cell["index"], "error": error}
        changed = harvester.changes(shell.user_ns)
        if changed:
            event["answers"] = changed
        _send(channel, event)

    event = {"event": "finished"}
    changed = harvester.changes(shell.user_ns)
    if changed:
        event["answers"] = changed
    _send(channel, event)
    _flush()
    os._exit(0)  # skip interpreter shutdown: atexit handlers and threads of the student's code


# ----------------------------------------------------------------------------- the system-call filter

# What no notebook needs and a hostile one uses to reach past its limits or its neighbours, denied by a
# seccomp filter before any student code runs (both modes, every level):
# - SysV shared memory, message queues, semaphores, POSIX message queues and memfd files hold memory
#   that RLIMIT_AS does not count, and can outlive the process;
# - the kernel keyrings are per uid, shared with the next student who gets the same uid;
# - new namespaces (unshare, setns, clone with CLONE_NEW*) would let code mount an unbounded tmpfs in a
#   user namespace of its own; clone3 is refused with ENOSYS so the C library falls back to clone;
# - sockets: the sandbox has no network, and a socket's queued buffers are kernel memory outside RLIMIT_AS
#   (a few hundred socket pairs held gigabytes); inotify instances count against a per-uid limit of the host;
# - ptrace and process_vm_*, userfaultfd, bpf, perf_event_open and io_uring: nothing a notebook needs;
# - setsid: a new session is a new autogroup at nice 0, which a run that gives way (giving_way.py) would
#   start every tenth of a second to stay ahead of the grader's looks.
_DENIED_CALLS = {  # name: (x86_64, aarch64); None where the architecture has no such call
    "shmget": (29, 194),
    "msgget": (68, 186),
    "semget": (64, 190),
    "mq_open": (240, 180),
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "unshare": (272, 97),
    "setns": (308, 268),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "userfaultfd": (323, 282),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "io_uring_setup": (425, 425),
    "socket": (41, 198),
    "socketpair": (53, 199),
    "inotify_init": (253, None),
    "inotify_init1": (294, 26),
    "setsid": (112, 157),
}
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_AUDIT_ARCH = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
_CLONE_NEW_FLAGS = 0x7E020000  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_X32_SYSCALL_BIT = 0x40000000
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_LD_ABS, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def seccomp_program(machine):
    """The filter as a list of (code, jump_true, jump_false, k) for the given `uname -m`, or None."""
    if machine not in _AUDIT_ARCH:
        return None
    column, arch = _AUDIT_ARCH[machine]
    # Jumps name labels; they are resolved to relative offsets below.
    program: list[tuple[Any, ...]] = [
        (_LD_ABS, 0, 0, 4),
        (_JEQ, "nr", "kill", arch),
        ("label", "nr"),
        (_LD_ABS, 0, 0, 0),
    ]
    if machine == "x86_64":
        program.append((_JGE, "eperm", 0, _X32_SYSCALL_BIT))  # the x32 ABI's numbers would dodge the list
    for number in sorted({n for n in (numbers[column] for numbers in _DENIED_CALLS.values()) if n is not None}):
        program.append((_JEQ, "eperm", 0, number))
    program += [
        (_JEQ, "enosys", 0, _CLONE3[column]),
        (_JEQ, "clone", 0, _CLONE[column]),
        (_RET, 0, 0, _RET_ALLOW),
        ("label", "clone"),
        (_LD_ABS, 0, 0, 16),
        (_AND, 0, 0, _CLONE_NEW_FLAGS),
        (_JEQ, "allow", "eperm", 0),
        ("label", "allow"),
        (_RET, 0, 0, _RET_ALLOW),
        ("label", "eperm"),
        (_RET, 0, 0, _RET_ERRNO | _EPERM),
        ("label", "enosys"),
        (_RET, 0, 0, _RET_ERRNO | _ENOSYS),
        ("label", "kill"),
        (_RET, 0, 0, _RET_KILL_PROCESS),
    ]
    labels: dict[str, int] = {}
    instructions: list[tuple[Any, ...]] = []
    for item in program:
        if item[0] == "label":
            labels[item[1]] = len(instructions)
        else:
            instructions.append(item)

    def offset(target, at):
        return target if type(target) is int else labels[target] - at - 1

    return [(code, offset(jt, at), offset(jf, at), k) for at, (code, jt, jf, k) in enumerate(instructions)]


# (libc, the filter's program as prctl takes it, or None): built once, in a warm worker before it forks
_FILTER: Any = None


def _prepared_filter():
    global _FILTER
    if _FILTER is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        program = seccomp_program(os.uname().machine)
        if program is None:
            _FILTER = (libc, None)
            return _FILTER

        class SockFilter(ctypes.Structure):
            _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

        filters = (SockFilter * len(program))(*[SockFilter(*instruction) for instruction in program])
        fprog = SockFprog(len(program), filters)
        fprog._keep = filters  # the program's memory lives as long as its header
        _FILTER = (libc, fprog)
    return _FILTER


def confine():
    """no_new_privs, then the system-call filter. True when the filter is in force."""
    import ctypes

    libc, fprog = _prepared_filter()
    _libc_call(libc.prctl, _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if fprog is None:
        return False
    _libc_call(libc.prctl, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)
    return True


# ----------------------------------------------------------------------------- the warm worker

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18


def _libc_call(function, *args):
    if function(*args) != 0:
        import ctypes

        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


# The student's pid 1: a small program that waits for ever, exec'd rather than forked (see _spawn_init)
_INIT_PROGRAMS = ("/usr/bin/sleep", "/bin/sleep")
_INIT_ARGUMENTS = ("2147483647",)  # seconds; busybox's sleep knows no `infinity`


def _init_program():
    for path in _INIT_PROGRAMS:
        if os.access(path, os.X_OK):
            return path
    raise OSError(f"the sandbox's view has no {' or '.join(_INIT_PROGRAMS)} to be each student's pid 1")


def _spawn_init(program):
    """Start pid 1 of the pid namespace the caller's next children are born in: `sleep`, as root and holding
    none of the run's pipes (they are not inheritable, and 0-2 are /dev/null). It is spawned (vfork and exec),
    so unlike a fork of the worker it copies none of the worker's memory, and it is started with SIGCHLD
    ignored, which it keeps across exec: whatever is orphaned to it is reaped by the kernel. Signals from
    inside its namespace cannot end it (the kernel keeps from a pid 1 every signal it has no handler for); it
    ends when whoever spawned it ends it (_end_init), after the student's process, and the kernel then kills
    everything left in the namespace. The caller must have no child that could end while SIGCHLD is ignored
    (it would be reaped unseen): the worker and its fork spawn it before they fork the student."""
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        return os.posix_spawn(
            program,
            [program, *_INIT_ARGUMENTS],
            {},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1),
                (os.POSIX_SPAWN_DUP2, 0, 2),
            ],
        )
    finally:
        signal.signal(signal.SIGCHLD, previous)


def _end_init(init):
    """End the student's pid 1, which makes the kernel kill whatever is left in its namespace and wait for it
    all to go; the CPU seconds it and what it reaped used."""
    os.kill(init, signal.SIGKILL)
    _, _, usage = os.wait4(init, 0)
    return usage.ru_utime + usage.ru_stime


def _fork_in_new_pid_namespace(libc, own_pid_namespace, init_program):
    """(pid 1, fork): a pid namespace of its own whose pid 1 is `init_program` (_spawn_init) and whose pid 2
    is the worker's fork, the student's process (the worker's later children stay in the worker's namespace)."""
    _libc_call(libc.unshare, _CLONE_NEWPID)  # only the worker's children are born in the new namespace
    init = None
    try:
        init = _spawn_init(init_program)
        child = os.fork()
    except BaseException:
        if init is not None:
            _end_init(init)
        _libc_call(libc.setns, own_pid_namespace, _CLONE_NEWPID)
        raise
    if child:  # the worker: back to its own namespace for its next children (the child stays in the new one)
        _libc_call(libc.setns, own_pid_namespace, _CLONE_NEWPID)
    return init, child


def _private_namespaces(libc, pid=False):
    """In the worker's forked child, as root: a mount and an IPC namespace of the student's own, and with
    `pid` a pid namespace for the children it makes next (see _run_child). The student's process is pid 2
    there, under a small pid 1 (_spawn_init); when it ends, pid 1 is ended and the kernel kills everything left
    behind, and the IPC namespace (shared memory, message queues) goes with it. Nothing of one student
    outlives their run."""
    _libc_call(libc.unshare, _CLONE_NEWNS | _CLONE_NEWIPC | (_CLONE_NEWPID if pid else 0))
    _libc_call(libc.mount, b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)


def _pid_namespace_round_trip(libc, own_pid_namespace):
    """Whether the worker may make a pid namespace for its next child and then return to its own (setns),
    tried in a throwaway fork. Root in the worker's view may; in a user namespace bubblewrap made, the
    worker's own pid namespace belongs to the user namespace outside, and setns back is refused."""
    child = os.fork()
    if child == 0:
        try:
            _libc_call(libc.unshare, _CLONE_NEWPID)
            _libc_call(libc.setns, own_pid_namespace, _CLONE_NEWPID)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _pass_on(student, init):
    """Outside the student's pid namespace (a worker that cannot return from one forks this process, which
    makes it and spawns its pid 1 and the student's process): wait for the student's process, end pid 1, then
    end the way the student's process ended, for the worker to report."""
    _, status = os.waitpid(student, 0)
    _end_init(init)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if 0 <= code < 256 else 70)


_PR_CAPBSET_DROP, _LINUX_CAPABILITY_VERSION_3, _LAST_CAPABILITY = 24, 0x20080522, 63


def _drop_bounding_set(libc):
    """Empty the bounding set (needs CAP_SETPCAP, which the worker keeps for this), so nothing executed
    later can gain a capability back. A process that holds no capability at all (a worker of a grader that is
    not root, at the rlimits level: no namespace to hold one in) may not lower it, and needs not: it has nothing
    to lose, and no_new_privs, set before any student code (confine), keeps a set-user-ID or file-capability
    program from adding any."""
    import ctypes

    for capability in range(_LAST_CAPABILITY + 1):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            error_number = ctypes.get_errno()
            if error_number == 22:  # EINVAL: past the kernel's last capability
                return
            if error_number == 1 and capability == 0 and _holds_no_capability():  # EPERM, and nothing to lose
                return
            raise OSError(error_number, f"cannot drop capability {capability} from the bounding set")


def _holds_no_capability():
    """Whether this process's permitted and effective sets are empty (the kernel's own account)."""
    try:
        with open("/proc/self/status", "rb") as status:
            held = {line.split(b":")[0]: line.split()[1] for line in status if line.startswith(b"Cap")}
    except OSError:
        return False
    return held.get(b"CapPrm") == held.get(b"CapEff") == b"0" * 16


def _drop_capabilities(libc):
    """Empty the effective, permitted and inheritable sets (capset, version 3), and so the ambient set."""
    import ctypes

    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _libc_call(libc.capset, header, data)


_STATVFS_TO_MOUNT = (
    (os.ST_NOSUID, _MS_NOSUID),
    (os.ST_NODEV, _MS_NODEV),
    (os.ST_NOEXEC, _MS_NOEXEC),
    (os.ST_NOATIME, 1024),
    (os.ST_NODIRATIME, 2048),
    (os.ST_RELATIME, 1 << 21),
)


def _locked_mount_flags(path):
    """The per-mount flags of the mount at `path` that a bind remount must keep (MS_ values)."""
    held = os.statvfs(path).f_flag
    return sum(mount for statvfs, mount in _STATVFS_TO_MOUNT if held & statvfs)


def _private_ptys(libc, options):
    """Mount a devpts of the run's own over /dev/pts, where bubblewrap's /dev/ptmx points, with `options` (a
    `max` among them): bubblewrap's instance has no bound of its own and draws on the machine-wide pool."""
    _libc_call(libc.mount, b"devpts", b"/dev/pts", b"devpts", _MS_NOSUID | _MS_NOEXEC, options.encode())


def private_ptys_then_exec(arguments):
    """A cold run's first step inside the view, still holding what bubblewrap kept (bubblewrap.py): `--private-ptys
    OPTIONS [--drop-capabilities] -- COMMAND...`. The run's own devpts (_private_ptys); then, with
    --drop-capabilities (a user namespace, where the run keeps its uid), every capability goes, as in a warm
    worker's child; then COMMAND (setpriv, which drops to the sandbox uid, or the runner)."""
    options, rest = arguments[0], arguments[1:]
    drop = rest[:1] == ["--drop-capabilities"]
    command = rest[rest.index("--") + 1 :]
    libc = _prepared_filter()[0]
    # Mount and IPC namespaces of its own: in a user namespace, bubblewrap's mount namespace is not the run's to
    # mount in.
    _private_namespaces(libc)
    _private_ptys(libc, options)
    if drop:
        _drop_bounding_set(libc)
        _drop_capabilities(libc)
    os.execvp(command[0], command)  # noqa: S606 - the grader's own command line, from bubblewrap.py


def _isolate_child(job, libc):
    """Before any student code: its own /proc and /tmp, limits, then the unprivileged uid."""
    import resource

    if job["private_tmp"]:
        # /proc of the student's own pid namespace: only their processes are visible. Read-only: nothing there is
        # the student's to set (a run that gives way could reset its autogroup's nice: giving_way.py).
        _libc_call(libc.mount, b"proc", b"/proc", b"proc", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
        options = f"size={job['tmp_mb']}m,mode=1777".encode()
        _libc_call(libc.mount, b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, options)
        # An interpreter that lives under /tmp (a venv in a CI checkout, say) was just covered up:
        # bind it back, read-only, from the alias the worker's view keeps of it.
        for alias, path in job["rebind"]:
            os.makedirs(path, 0o755, exist_ok=True)
            _libc_call(libc.mount, alias.encode(), path.encode(), None, _MS_BIND | _MS_REC, None)
            # In a user namespace the kernel locks the flags the mount had where it came from (nosuid, nodev, ...):
            # a remount that drops one is refused (EPERM), so keep every one of them and only add read-only.
            _libc_call(
                libc.mount,
                None,
                path.encode(),
                None,
                _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _locked_mount_flags(alias),
                None,
            )
        _private_ptys(libc, job["ptys"])
    os.chdir(job["cwd"])
    # Below the grader where the kernel schedules processes one by one. With autogroup on (Debian's default),
    # the setsid below gives the student a scheduling group of its own at the group's nice 0, and this
    # ranks the student's processes only among themselves.
    os.nice(job["nice"])
    for name, value in job["rlimits"].items():
        resource.setrlimit(getattr(resource, name), tuple(value) if _type(value) is _list else (value, value))
    os.setsid()
    _drop_bounding_set(libc)
    if job["uid"] is not None:
        os.setgroups([])
        os.setgid(job["uid"])
        os.setuid(job["uid"])  # from root to a plain uid: the permitted, effective and ambient sets go with it
    # The inheritable set does not go with root (bubblewrap filled it with the worker's capabilities), and a worker
    # in a user namespace keeps its uid and so every set: empty them all.
    _drop_capabilities(libc)
    os.environ.clear()
    os.environ.update(job["env"])


def _leave_run(fds):
    """A process that takes no part in the run keeps none of its pipes: their ends close with the student's."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for fd in (devnull, *fds):
        os.close(fd)


def _run_child(job, fds, shell, in_namespace, preloaded, init_program):
    """The forked child of a warm worker: set up the student's process and run the submission."""
    request_fd, channel_fd, output_fd = fds
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.close(output_fd)
    libc = _prepared_filter()[0]
    if job["namespaces"]:  # with in_namespace, this process is already pid 2 of its own pid namespace (see serve)
        _private_namespaces(libc, pid=not in_namespace)
        if not in_namespace:
            init = _spawn_init(init_program)
            student = os.fork()
            if student:
                _leave_run((request_fd, channel_fd))
                _pass_on(student, init)
    _isolate_child(job, libc)
    confined = confine()
    stream = os.fdopen(request_fd, "rb")
    request = json.loads(stream.readline())
    _stdin_from_devnull()

    def go():
        stream.read()  # the grader closes the pipe once it has taken the run's measure at `ready`
        stream.close()

    run_request(request, channel_fd, shell, confined=confined, preloaded=preloaded, go=go)


def _preload(shell, sources):
    """Run the grader's own first cells of every submission (the course's helper module, handed in on stdin)
    once in the worker, before any submission is seen, rather than in every child: each child is a fork, so it
    starts with its own copy of what they made, which nothing of another child can have touched. Returns the
    sources that ran without error, in order (a cell that fails, and those after it, run in each child as
    before). Their output, if any, goes to the worker's log: they are meant to print nothing."""
    done = []
    for source in sources:
        if _type(source) is not _str:
            break
        try:
            if _error_text(run_cell(shell, source)) is not None:
                break
        except _BaseException:
            break
        done.append(source)
    _flush()
    return tuple(done)


def _warm_up(torch):
    """What every notebook's first cells would otherwise do in each child: torch's first backward pass, a
    retained gradient and printing a tensor initialise code and caches that then stay warm in the worker's
    memory for every fork. Trusted code on the worker's own values; nothing of a student is involved."""
    try:
        x = torch.tensor(3.0, requires_grad=True)
        y = x**3
        y.retain_grad()
        (2 * y).backward()
        for value in (x.grad, y.grad, torch.tensor([1.0, 2.5]), x.grad.item()):
            _str(value)
        with torch.no_grad():
            (x * 2).detach()
    except _BaseException:
        pass


# The first traceback a process shows costs far more than the next (~15 ms against ~1 ms here: IPython imports
# pygments, its styles and formatters, and fills its caches; a first error from inside torch and a first syntax error
# a few ms more), and most students' notebooks raise somewhere (a public check that fails raises). So a worker shows
# these once, before it serves anyone, and each child has what they loaded from the fork. Trusted cells that bind no
# name; what they leave behind (sys.last_*, the traceback `%tb` and `%debug` read, the last input line) is cleared:
# a student's notebook starts in a shell that has shown no error.
_TRACEBACK_CELLS = ("1 / 0", "__import__('torch').ones(1).backward()", "(")


def _warm_up_tracebacks(shell):
    import io

    sink = io.StringIO()
    names = set(shell.user_ns)
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            for source in _TRACEBACK_CELLS:
                run_cell(shell, source)
    except _BaseException:
        pass
    for name in set(shell.user_ns) - names:
        del shell.user_ns[name]
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        with contextlib.suppress(AttributeError):
            delattr(sys, name)
    shell.InteractiveTB.tb = None
    shell._last_input_line = None
    shell.last_execution_succeeded, shell.last_execution_result = True, None


# A worker's anonymous memory (torch's and the interpreter's, ~150 MiB) in 4 KiB pages makes each fork dear: the
# kernel copies one page-table entry per page and the child's exit frees them again, ~25 ms of CPU a run on a
# virtual machine (where each entry costs more), against ~8 ms in 2 MiB pages (docs/performance.md). So a worker that
# has served a few runs (a pool's start-up self-test and run_autograder's single student never get there: the
# collapse costs ~0.3 s of CPU once) asks the kernel to move that memory into huge pages. Copy-on-write is as before:
# a child's first write to a huge page splits it and copies only the 4 KiB it writes. Best effort: a kernel without
# MADV_COLLAPSE (before 6.1) refuses, and the worker forks as before.
_MADV_COLLAPSE = 25
_HUGE_PAGE = 2 << 20
_COLLAPSE_AFTER_RUNS = 4


def _collapse_into_huge_pages(libc):
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or "w" not in fields[1] or "p" not in fields[1]:
            continue
        if len(fields) > 5 and fields[5] != "[heap]":  # a file's pages (no copy at fork), a stack
            continue
        low, high = (int(value, 16) for value in fields[0].split("-"))
        start, end = (low + _HUGE_PAGE - 1) & ~(_HUGE_PAGE - 1), high & ~(_HUGE_PAGE - 1)
        if end > start:
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_COLLAPSE)


def serve(control_fd):
    """Warm worker: import the heavy modules once, then fork one child per submission.

    The worker never reads a submission: the grader passes it the three pipe ends of a run (request,
    channel, output) over the control socket, and only the child reads the request. So nothing of one
    student is in the worker's memory when the next student's child is forked from it.
    """
    import socket

    control = socket.socket(fileno=control_fd)
    shell, preloaded, libc = _prepare_worker()
    # whether a child can be born in a pid namespace of its own (see _pid_namespace_round_trip), found at the
    # first run that asks for namespaces, with what that needs
    namespaces = {"own": None, "init_program": None, "round_trip": None}
    os.set_inheritable(control_fd, False)  # nothing the worker spawns (a student's pid 1) holds it
    gc.freeze()  # what the worker made stays out of every child's collections (which would copy its pages)

    control.sendall(b'{"event": "ready"}\n')
    runs = 0
    while True:
        if runs == _COLLAPSE_AFTER_RUNS:
            _collapse_into_huge_pages(libc)
        runs += 1
        message, fds, _, _ = socket.recv_fds(control, 65536, 3)
        if not message or len(fds) != 3:
            os._exit(0)
        _serve_one(control, json.loads(message), fds, shell, preloaded, libc, namespaces)


def _prepare_worker():
    """torch warmed up, the shell made, the prelude run and the released cells compiled, the filter prepared,
    all before any submission is seen: (the shell, what the prelude preloaded, libc)."""
    try:
        import torch  # what nearly every notebook imports first
    except ImportError:
        pass
    else:
        _warm_up(torch)
    # The shell is made before any submission is seen; each child gets its own copy by forking.
    shell = _new_shell()
    _warm_up_tracebacks(shell)
    try:  # from the grader: {"prelude": cells to run now, "compiled": the released notebook's cells}
        handed = json.loads(sys.stdin.buffer.read() or b"{}")
    except ValueError:
        handed = {}
    handed = handed if _type(handed) is _dict else {}
    _stdin_from_devnull()
    prelude, released = handed.get("prelude"), handed.get("compiled")
    preloaded = _preload(shell, prelude if _type(prelude) is _list else [])
    _precompile(shell, released if _type(released) is _list else [])
    return shell, preloaded, _prepared_filter()[0]


def _serve_one(control, job, fds, shell, preloaded, libc, namespaces):
    """One run: fork its child (in a pid namespace of its own where it can be), tell the grader, wait for it and
    report its exit and CPU time."""
    for fd in fds:
        os.set_inheritable(fd, False)  # the run's pipes: for the student's process, not its pid 1
    if job["namespaces"] and namespaces["round_trip"] is None:
        namespaces["init_program"] = _init_program()
        namespaces["own"] = os.open("/proc/self/ns/pid", os.O_RDONLY)
        namespaces["round_trip"] = _pid_namespace_round_trip(libc, namespaces["own"])
    own_pid_namespace, init_program = namespaces["own"], namespaces["init_program"]
    init = None
    if job["namespaces"] and namespaces["round_trip"]:
        init, child = _fork_in_new_pid_namespace(libc, own_pid_namespace, init_program)
    else:  # with namespaces, the child makes the pid namespace and its pid 1 (see _run_child)
        child = os.fork()
    if child == 0:
        try:
            control.close()
            if own_pid_namespace is not None:
                os.close(own_pid_namespace)
            _run_child(job, fds, shell, init is not None, preloaded, init_program)
        except BaseException:
            import traceback

            traceback.print_exc()  # into the run's output: the grader reports the start-up failure
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    control.sendall(_encode({"event": "forked", "pid": child}).encode() + b"\n")
    _, status, usage = os.wait4(child, 0)  # the CPU time of the child and all it reaped, for the grader
    cpu = usage.ru_utime + usage.ru_stime
    if init is not None:
        cpu += _end_init(init)
    # `emptied`: the worker itself ended the run's pid 1, and so (the kernel's doing, before that wait returned)
    # every process of the run: the grader need not look for any.
    control.sendall(
        _encode(
            {"event": "exit", "code": os.waitstatus_to_exitcode(status), "cpu": cpu, "emptied": init is not None}
        ).encode()
        + b"\n"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    elif sys.argv[1:2] == ["--private-ptys"]:
        private_ptys_then_exec(sys.argv[2:])
    else:
        main()
