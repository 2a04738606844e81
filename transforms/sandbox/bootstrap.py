# Runs before the program: sets resource limits (soft and hard alike),
# installs an audit hook that refuses writes outside the working directory,
# then executes the program as __main__.
# argv: [limits as JSON, program path]
import json
import os
import resource
import sys

_cfg = json.loads(sys.argv[1])
_path = sys.argv[2]


def _limit(res, value):
    if value and value > 0:
        resource.setrlimit(res, (value, value))


_limit(resource.RLIMIT_CPU, _cfg.get("cpu"))
_limit(resource.RLIMIT_AS, _cfg.get("as"))
_limit(resource.RLIMIT_FSIZE, _cfg.get("fsize"))
_limit(resource.RLIMIT_NOFILE, _cfg.get("nofile"))
_limit(resource.RLIMIT_NPROC, _cfg.get("nproc"))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

_root = os.path.realpath(os.getcwd())
_block_net = bool(_cfg.get("block_net"))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_in_hook = [False]


def _inside(p):
    if isinstance(p, int):
        return True  # an already open descriptor
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not isinstance(p, str):
        p = os.fspath(p)
    if p == "/dev/null":
        return True
    full = os.path.realpath(os.path.join(_root, p))
    return full == _root or full.startswith(_root + os.sep)


def _deny(what, p):
    raise PermissionError("sandbox: %s outside the working directory refused: %r" % (what, p))


def _hook(event, args):
    if _in_hook[0]:
        return
    _in_hook[0] = True
    try:
        if event == "open":
            path, mode, flags = args
            writes = False
            if isinstance(mode, str):
                writes = any(c in mode for c in "wax+")
            elif isinstance(flags, int):
                writes = bool(flags & _WRITE_FLAGS)
            if writes and path is not None and not _inside(path):
                _deny("writing", path)
        elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod",
                       "os.chown", "os.utime", "os.link", "os.symlink"):
            if not _inside(args[0]):
                _deny(event, args[0])
        elif event == "os.rename":
            for p in args[:2]:
                if not _inside(p):
                    _deny(event, p)
        elif _block_net and event in ("socket.connect", "socket.bind", "socket.sendto",
                                       "socket.getaddrinfo", "socket.__new__"):
            raise PermissionError("sandbox: network access refused (%s)" % event)
    finally:
        _in_hook[0] = False


with open(_path, encoding="utf-8") as _f:
    _src = _f.read()
_code = compile(_src, _path, "exec")
sys.argv = [_path]
sys.addaudithook(_hook)
del _f, _src
exec(_code, {"__name__": "__main__", "__file__": _path, "__builtins__": __builtins__})
