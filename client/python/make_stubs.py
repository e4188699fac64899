#!/usr/bin/env python3
"""Writes splitspec.pyi, the type stubs of the built `splitspec` module, from
the module itself: pybind11 puts every function's and property getter's
signature on the first line of its docstring, so the stubs cannot drift from
the binding. Run by the Python package's build (setup.py) and by the tests.

usage: make_stubs.py MODULE_DIR OUT.pyi
"""
import importlib
import inspect
import re
import sys

HEADER = '''"""Type stubs of splitspec, generated from the module by make_stubs.py."""
import datetime
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union, overload

'''


def clean(text):
    """A pybind11 type as a stub writes it: our own types unqualified, defaults elided."""
    return text.replace("splitspec.", "").replace("datetime.timedelta", "datetime.timedelta")


def split_params(params):
    """Top-level comma split of a parameter list (types nest brackets, defaults parentheses)."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def signature(line, name, method):
    """`name(a: T = default, ...) -> R` as a stub's def line."""
    m = re.match(r"^\s*(?:\d+\.\s*)?" + re.escape(name) + r"\((.*)\)\s*->\s*(.+?)\s*$", line)
    if not m:
        return None
    params = []
    for p in split_params(m.group(1)):
        if p in ("*args", "**kwargs") or p.startswith("*"):
            params.append(p)
            continue
        pname, _, rest = p.partition(":")
        ptype, eq, _ = rest.partition("=")
        pname = pname.strip()
        if method and not params and pname in ("self", "arg0"):
            params.append("self")
            continue
        params.append("%s: %s%s" % (pname, clean(ptype.strip()) or "Any", " = ..." if eq else ""))
    if method and (not params or params[0] != "self"):
        params.insert(0, "self")
    return "def %s(%s) -> %s: ..." % (name, ", ".join(params), clean(m.group(2)))


def function_lines(name, fn, method, indent):
    doc = inspect.getdoc(fn) or ""
    lines = doc.splitlines()
    overloads = [l for l in lines if re.match(r"^\d+\.\s*" + re.escape(name) + r"\(", l)]
    out = []
    if overloads:
        for l in overloads:
            sig = signature(l, name, method)
            if sig:
                out += [indent + "@overload", indent + sig]
    elif lines:
        sig = signature(lines[0], name, method)
        if sig:
            out.append(indent + sig)
    if not out:
        out.append(indent + "def %s(%s*args: Any, **kwargs: Any) -> Any: ..." % (name, "self, " if method else ""))
    return out


def property_lines(name, prop, indent):
    doc = (prop.fget.__doc__ or "") if prop.fget else ""
    m = re.match(r"^\(.*\)\s*->\s*(.+?)\s*$", doc.splitlines()[0] if doc else "")
    kind = clean(m.group(1)) if m else "Any"
    if prop.fset is not None:
        return [indent + "%s: %s" % (name, kind)]
    return [indent + "@property", indent + "def %s(self) -> %s: ..." % (name, kind)]


def class_lines(name, cls):
    if issubclass(cls, BaseException):
        return ["class %s(Exception): ..." % name, ""]
    out = ["class %s:" % name]
    doc = inspect.getdoc(cls)
    if doc:
        out.append('    """%s"""' % doc.splitlines()[0].replace('"""', "'''"))
    for attr, value in cls.__dict__.items():
        if attr.startswith("_") and attr not in ("__init__", "__iter__", "__next__", "__enter__", "__exit__",
                                                 "__iadd__", "__add__"):
            continue
        if isinstance(value, property):
            out += property_lines(attr, value, "    ")
        elif isinstance(value, staticmethod) or type(value).__name__ == "staticmethod":
            out += ["    @staticmethod"] + function_lines(attr, value.__func__, False, "    ")
        elif callable(value):
            out += function_lines(attr, value, True, "    ")
    out.append("")
    return out


def main():
    sys.path.insert(0, sys.argv[1])
    module = importlib.import_module("splitspec")
    body = []
    if getattr(module, "__version__", None):
        body.append("__version__: str")
        body.append("")
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        if inspect.isclass(value):
            body += class_lines(name, value)
        elif callable(value):
            body += function_lines(name, value, False, "") + [""]
    with open(sys.argv[2], "w") as f:
        f.write(HEADER + "\n".join(body).rstrip() + "\n")


if __name__ == "__main__":
    main()
