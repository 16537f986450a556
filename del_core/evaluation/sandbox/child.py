"""The first code of a sandboxed program's process (run by ``harness.py`` as
``python -I -B child.py CONFIG_JSON PROGRAM``, cwd = a throwaway dir; CONFIG_JSON["mode"]
is namespaces, basic or none).

Self-contained: it cannot import the project (``-I``). In this order it
  1. sets resource limits (every mode): RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE (stdout, stderr and
     any file), RLIMIT_NOFILE, RLIMIT_CORE = 0, RLIMIT_NPROC = 0 (no new process or thread; the
     kernel ignores it for uid 0, hence step 2);
  2. namespaces (already inside bubblewrap): when still root (privileged bwrap), drops to
     CONFIG uid/gid (65534) and refuses to go on as root; basic: moves into a new, empty network
     namespace (unshare CLONE_NEWNET; as non-root with CLONE_NEWUSER) when the kernel allows it,
     and when root with a user configured, drops to that user unless the interpreter's stdlib or
     site-packages is not readable by other users (then it stays root and says why); none: nothing;
  3. namespaces and basic: installs an audit hook (cannot be removed; defence in depth, not a
     boundary) that refuses process creation (fork, exec, spawn, system, subprocess), signals to
     other processes, sockets, ctypes, sub-interpreters, gc's object queries (which would reach
     the hook), chdir outside the working directory, opening a directory outside it (dir_fd
     writes), and writing, creating, renaming or deleting files outside it; its state lives in
     closures of immutable values, not in module globals. It also replaces setsid, setpgid,
     setpgrp and the pidfd functions of os and posix, which have no audit event;
  4. writes one line ``SANDBOX-LAYERS {json}`` to stderr saying the mode and what took effect,
     then runs the program as ``__main__``.
A refused operation raises PermissionError and writes ``SANDBOX-VIOLATION <event>`` to stderr.
"""

import ctypes  # imported before the guards so that libraries importing it still load
import json
import os
import pwd
import resource
import signal
import site
import stat
import sys
import types


def _set_limits(config):
    cpu = int(config["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (config["memory_bytes"], config["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (config["output_bytes"], config["output_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (config["open_files"], config["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def _new_network_namespace():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        clone_newnet, clone_newuser = 0x40000000, 0x10000000
        flags = clone_newnet if os.geteuid() == 0 else clone_newnet | clone_newuser
        done = libc.unshare(flags) == 0
        del libc
        return done
    except Exception:
        return False


def _unreadable_by_others():
    """The first directory Python needs (stdlib, site-packages) that another user cannot read."""
    for path in [os.path.dirname(os.__file__), *site.getsitepackages()]:
        path = os.path.realpath(path)
        if not os.path.isdir(path):
            continue
        if os.stat(path).st_mode & (stat.S_IROTH | stat.S_IXOTH) != (stat.S_IROTH | stat.S_IXOTH):
            return path
        parent = os.path.dirname(path)
        while parent != os.path.dirname(parent):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return parent
            parent = os.path.dirname(parent)
    return None


def _drop_privileges(user):
    """Become ``user`` when root; returns (dropped, reason when not)."""
    if os.geteuid() != 0 or not user:
        return False, "not root" if user else "no user configured"
    blocker = _unreadable_by_others()
    if blocker is not None:
        return False, f"{blocker} is not readable by other users"
    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    return True, None


_REFUSED = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "ctypes.cdata",
        "ctypes.string_at",
        "ctypes.wstring_at",
        "os.setuid",
        "os.setgid",
        "os.chroot",
        "mmap.__new__",
        "sys.remote_exec",
        "cpython.PyInterpreterState_New",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.settrace",
        "sys.setprofile",
    }
)
# events whose path arguments must lie inside the working directory: event -> argument positions
_PATH_EVENTS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.symlink": (0, 1),
    "os.link": (0, 1),
    "os.utime": (0,),
    "os.chflags": (0,),
    "os.lchflags": (0,),
    "shutil.rmtree": (0,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# modules that run code in a new interpreter (and posix: importing it anew restores the functions
# replaced below); importing them raises an audit event only when they are not loaded yet
_DENIED_IMPORTS = frozenset({"_testcapi", "_testinternalcapi", "_xxsubinterpreters", "_interpreters", "posix"})
_PROTECTED = frozenset({"__code__", "__defaults__", "__kwdefaults__"})  # of this file's functions


def _outside(path, inside, allowed, lstat, readlink, fspath, isinstance, bytes, str, int, OSError, whole):
    """None when PATH (relative to the working directory INSIDE, which ends with "/") lies inside it,
    is an fd or is an allowed file; else PATH made absolute and free of symlinks. Built by
    :func:`_guarded` with no globals: a program patching os, posixpath or builtins cannot bend it."""
    if path is None or isinstance(path, int):
        return None
    path = fspath(path)
    path = bytes.decode(path, errors="replace") if isinstance(path, bytes) else str.__getitem__(path, whole)
    pending = (path if path.startswith("/") else inside + path).split("/")[::-1]
    done, hops = "", 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            done = done.rpartition("/")[0]
            continue
        candidate = done + "/" + part
        try:
            target = readlink(candidate) if hops < 40 and lstat(candidate).st_mode & 0o170000 == 0o120000 else None
        except OSError:
            target = None
        if target is None:
            done = candidate
            continue
        hops += 1
        done = "" if target.startswith("/") else done
        pending.extend(target.split("/")[::-1])
    done = done or "/"
    return None if (done + "/").startswith(inside) or done in allowed else done


def _hook(
    event, args, refused, imports, path_events, write_flags, protected, child, outside, stat, report,
    isinstance, int, bool, len, getattr, PermissionError, OSError,
):  # fmt: skip
    """The audit hook (module docstring, step 3), built by :func:`_guarded` with no globals: every
    name it uses is a bound default (immutable values and builtins)."""
    why = None
    if event in refused:
        why = event
    elif event == "import" and args[0] in imports:
        why = f"import {args[0]}"
    elif event == "object.__setattr__" and args[1] in protected:
        if getattr(getattr(args[0], "__code__", None), "co_filename", None) == child:
            why = f"changing the sandbox's {args[1]}"
    elif event == "os.chdir" and (isinstance(args[0], int) or outside(args[0]) is not None):
        why = f"os.chdir {args[0]!r}"
    elif event == "open":
        path, mode, flags = args
        writes = mode is not None and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)
        writes = writes or bool((flags or 0) & write_flags)
        where = outside(path)
        if where is not None and writes:
            why = f"open for writing {path!r}"
        elif where is not None:
            try:
                if stat(where).st_mode & 0o170000 == 0o040000:
                    why = f"open of the directory {path!r}"  # a dir_fd for writes outside
            except OSError:
                pass
    else:
        for name, positions in path_events:
            if name == event:
                for position in positions:
                    if position < len(args) and outside(args[position]) is not None:
                        why = f"{event} {args[position]!r}"
    if why is not None:
        report(2, f"\nSANDBOX-VIOLATION {why}\n".encode())
        raise PermissionError(f"sandbox: {why} is not allowed")


def _guarded(function, defaults):
    """FUNCTION's code with DEFAULTS bound after its first parameters and no globals or builtins."""
    return types.FunctionType(function.__code__, {"__builtins__": {}}, function.__name__, tuple(defaults))


def _install_guards(workdir):
    """Install the audit hook (:func:`_hook`) and replace the unaudited process functions."""
    import posix

    inside = os.path.realpath(workdir).rstrip("/") + "/"
    builtins = (isinstance, bytes, str, int, OSError, slice(None))
    outside = _guarded(_outside, (inside, frozenset({"/dev/null"}), posix.lstat, posix.readlink, os.fspath, *builtins))
    path_events = tuple(_PATH_EVENTS.items())
    free = (isinstance, int, bool, len, getattr, PermissionError, OSError)
    hook = _guarded(
        _hook,
        (
            _REFUSED,
            _DENIED_IMPORTS,
            path_events,
            _WRITE_FLAGS,
            _PROTECTED,
            __file__,
            outside,
            posix.stat,
            os.write,
            *free,
        ),
    )
    sys.addaudithook(hook)
    names = ("setsid", "setpgid", "setpgrp", "pidfd_open", "fork", "forkpty", "kill", "killpg")
    for module, module_names in ((os, names), (posix, names), (signal, ("pidfd_send_signal",))):
        for name in module_names:
            if hasattr(module, name):
                setattr(module, name, _not_allowed(f"{module.__name__}.{name}"))


def _not_allowed(name):
    def blocked(*args, **kwargs):
        os.write(2, f"\nSANDBOX-VIOLATION {name}\n".encode())
        raise PermissionError(f"sandbox: {name} is not allowed")

    return blocked


def _drop_to_ids(uid, gid):
    """Inside bubblewrap: become uid/gid when still root; never go on as root."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise SystemExit("sandbox: still root inside the namespaces")
    return os.getuid()


def _isolate(config):
    """Step 2 of the module docstring for config["mode"]; the layers that took effect."""
    mode = config.get("mode", "basic")
    if mode == "none":
        return {"mode": "none"}
    if mode == "namespaces":
        uid = _drop_to_ids(config["uid"], config["gid"])
        return {"mode": "namespaces", "network_namespace": True, "pid_namespace": True, "uid": uid}
    layers = {"mode": "basic", "network_namespace": _new_network_namespace(), "dropped_to_user": None}
    dropped, reason = _drop_privileges(config.get("user"))
    if dropped:
        layers["dropped_to_user"] = config["user"]
    else:
        layers["not_dropped"] = reason
    return layers


def main():
    config, program_path = json.loads(sys.argv[1]), sys.argv[2]
    sys.dont_write_bytecode = True
    with open(program_path, encoding="utf-8") as handle:
        source = handle.read()
    _set_limits(config)
    layers = _isolate(config)
    if layers["mode"] != "none":
        _install_guards(os.getcwd())
    os.write(2, ("SANDBOX-LAYERS " + json.dumps(layers) + "\n").encode())
    module = types.ModuleType("__main__")
    module.__file__ = program_path
    sys.modules["__main__"] = module
    sys.argv = [program_path]
    code = compile(source, "program.py", "exec")
    del config, source, layers
    exec(code, module.__dict__)


if __name__ == "__main__":
    main()
