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


def main():
    channel = int(sys.argv[1])
    request = json.loads(sys.stdin.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(os.devnull)

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Plain"
    shell = InteractiveShell.instance(config=config)
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


if __name__ == "__main__":
    main()
