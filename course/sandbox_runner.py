"""The program that runs *inside* the sandbox, next to the student's code.

It is handed to the interpreter as text (`python -I -c ...`), so it imports nothing of the course
package: only the standard library and IPython. It reads one JSON request on stdin, runs each cell with
IPython, and reports on the channel fd (argv[1]) one JSON line per event. Everything it reports is a
claim made from inside the student's process: the grader validates it as untrusted plain data.
"""

import json
import math
import os
import signal
import sys
from json.encoder import encode_basestring_ascii as _quote

# Captured before any student code runs, so that replacing builtins or module attributes in a
# notebook does not change how answers are encoded and reported.
_write, _type, _callable, _isfinite, _len, _str = os.write, type, callable, math.isfinite, len, str
_float_repr, _int_repr, _BaseException, _TypeError = float.__repr__, int.__repr__, BaseException, TypeError
_list, _dict, _float, _int, _bool = list, dict, float, int, bool
_MAX_LIST = 1000
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
    """Reads the answer names after each cell. A function answer is called at the grader's points as soon
    as it is defined (and again whenever it is redefined), so a later crash cannot lose its results."""

    def __init__(self, names, functions, call_seconds):
        self.names, self.functions, self.call_seconds = names, functions, call_seconds
        self.probed = {}  # name -> (function object, results)

    def harvest(self, namespace):
        answers = {}
        for name in self.names:
            answer = _harvest_one(namespace, name, self.functions)
            if answer.get("kind") == "function":
                function = namespace[name]
                seen = self.probed.get(name)
                if seen is None or seen[0] is not function:
                    seen = (function, _probe(function, self.functions[name], self.call_seconds))
                    self.probed[name] = seen
                answer["probes"] = seen[1]
            answers[name] = answer
        return answers


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
    results = []
    for x in points:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            value = function(x)
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                results.append({"x": x, "value": _scalar(value)})
            except TypeError:
                results.append({"x": x, "error": f"returned a {_describe(value)}, not a plain number"})
        except _CallTimeout:
            results.append({"x": x, "error": f"did not return within {seconds:g} s"})
        except BaseException as error:
            signal.setitimer(signal.ITIMER_REAL, 0)
            results.append({"x": x, "error": f"raised {_describe(error)}"})
    return results


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
            stream.flush()
        except _BaseException:
            pass


def _stdin_from_devnull():
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(os.devnull)


def _new_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Plain"
    return InteractiveShell.instance(config=config)


def main():
    """Cold start: the request on stdin, the channel fd in argv[1]."""
    channel = int(sys.argv[1])
    request = json.loads(sys.stdin.read())
    _stdin_from_devnull()
    run_request(request, channel)


def run_request(request, channel, shell=None):
    """Run the cells of one submission, reporting on the channel; never returns."""
    shell = shell or _new_shell()
    harvester = _Harvester(request["answers"], request["functions"], request["call_seconds"])
    _send(channel, {"event": "ready"})

    for cell in request["cells"]:
        _send(channel, {"event": "start", "cell": cell["index"]})
        try:
            result = shell.run_cell(cell["source"], store_history=False)
            error = _error_text(result)
        except BaseException as escaped:  # SystemExit or KeyboardInterrupt raised past IPython
            error = f"{_describe(escaped)} ended the cell"
        _flush()
        _send(channel, {
            "event": "done",
            "cell": cell["index"],
            "error": error,
            "answers": harvester.harvest(shell.user_ns),
        })

    _send(channel, {"event": "finished", "answers": harvester.harvest(shell.user_ns)})
    _flush()
    os._exit(0)  # skip interpreter shutdown: atexit handlers and threads of the student's code


# ----------------------------------------------------------------------------- the warm worker

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_PR_SET_NO_NEW_PRIVS = 38


def _libc_call(function, *args):
    if function(*args) != 0:
        import ctypes

        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def _isolate_child(job):
    """In the forked child, before any student code: its own /tmp, limits, then the unprivileged uid."""
    import ctypes
    import resource

    libc = ctypes.CDLL(None, use_errno=True)
    if job["private_tmp"]:
        _libc_call(libc.unshare, _CLONE_NEWNS)
        _libc_call(libc.mount, b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        options = f"size={job['tmp_mb']}m,mode=1777".encode()
        _libc_call(libc.mount, b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, options)
        # An interpreter that lives under /tmp (a venv in a CI checkout, say) was just covered up:
        # bind it back, read-only, from the alias the worker's view keeps of it.
        for alias, path in job["rebind"]:
            os.makedirs(path, 0o755, exist_ok=True)
            _libc_call(libc.mount, alias.encode(), path.encode(), None, _MS_BIND | _MS_REC, None)
            _libc_call(libc.mount, None, path.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_REC, None)
    os.chdir(job["cwd"])
    os.nice(job["nice"])  # below the grader: an endless loop cannot starve the submissions around it
    for name, value in job["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    os.setsid()
    if job["uid"] is not None:
        os.setgroups([])
        os.setgid(job["uid"])
        os.setuid(job["uid"])  # from root to a plain uid: every capability is dropped with it
    _libc_call(libc.prctl, _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.environ.clear()
    os.environ.update(job["env"])


def serve(control_fd):
    """Warm worker: import the heavy modules once, then fork one child per submission.

    The worker never reads a submission: the grader passes it the three pipe ends of a run (request,
    channel, output) over the control socket, and only the child reads the request. So nothing of one
    student is in the worker's memory when the next student's child is forked from it.
    """
    import socket

    control = socket.socket(fileno=control_fd)
    try:
        import torch  # noqa: F401 - what nearly every notebook imports first
    except ImportError:
        pass
    # The shell is made before any submission is seen; each child gets its own copy by forking.
    shell = _new_shell()

    control.sendall(b'{"event": "ready"}\n')
    while True:
        message, fds, _, _ = socket.recv_fds(control, 65536, 3)
        if not message or len(fds) != 3:
            os._exit(0)
        job = json.loads(message)
        child = os.fork()
        if child == 0:
            try:
                control.close()
                request_fd, channel_fd, output_fd = fds
                os.dup2(output_fd, 1)
                os.dup2(output_fd, 2)
                os.close(output_fd)
                _isolate_child(job)
                with os.fdopen(request_fd, "rb") as stream:
                    request = json.loads(stream.read())
                _stdin_from_devnull()
                run_request(request, channel_fd, shell)
            except BaseException:
                import traceback

                traceback.print_exc()  # into the run's output: the grader reports the start-up failure
            finally:
                os._exit(70)
        for fd in fds:
            os.close(fd)
        control.sendall(_encode({"event": "forked", "pid": child}).encode() + b"\n")
        _, status = os.waitpid(child, 0)
        control.sendall(_encode({"event": "exit", "code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    else:
        main()
