"""The first code of a sandboxed program's process (run by ``sandbox.py`` as
``python -I -B sandbox_child.py CONFIG_JSON PROGRAM``, in a fresh session, cwd = a throwaway dir).

Self-contained: it cannot import the project (``-I``). In this order it
  1. sets resource limits: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE (stdout, stderr and any file),
     RLIMIT_NOFILE, RLIMIT_CORE = 0, RLIMIT_NPROC = 0 (no new process or thread; the kernel ignores
     it for root, hence step 3);
  2. moves into a new, empty network namespace (unshare CLONE_NEWNET; as non-root with
     CLONE_NEWUSER) when the kernel allows it;
  3. when running as root and a user is configured, drops to that user (setgroups/setgid/setuid),
     unless the interpreter's stdlib or site-packages is not readable by other users (for example
     a Python under /root): then it stays root and says why;
  4. installs an audit hook (cannot be removed) that refuses process creation (fork, exec, spawn,
     system, subprocess), signals to other processes (kill, killpg), sockets, loading or calling
     native functions through ctypes (imported beforehand, so libraries that import it load), and writing,
     creating, renaming or deleting files outside the working directory; and replaces os.setsid,
     os.setpgid, os.setpgrp and the pidfd functions, which have no audit event;
  5. writes one line ``SANDBOX-LAYERS {json}`` to stderr saying which of steps 2-3 took effect,
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


_REFUSED = {
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
}
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


def _install_guards(workdir):
    inside = os.path.realpath(workdir) + os.sep
    allowed_files = {"/dev/null"}
    report = os.write

    def refuse(event):
        report(2, f"\nSANDBOX-VIOLATION {event}\n".encode())
        raise PermissionError(f"sandbox: {event} is not allowed")

    def outside(path):
        if isinstance(path, int) or path is None:
            return False
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        full = os.path.realpath(os.path.join(inside, os.fspath(path)))
        return not (full + os.sep).startswith(inside) and full not in allowed_files

    def hook(event, args):
        if event in _REFUSED:
            refuse(event)
        elif event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if writes and outside(path):
                refuse(f"open for writing {path!r}")
        elif event in _PATH_EVENTS:
            for position in _PATH_EVENTS[event]:
                if position < len(args) and outside(args[position]):
                    refuse(f"{event} {args[position]!r}")

    sys.addaudithook(hook)

    def not_allowed(name):
        def blocked(*args, **kwargs):
            refuse(name)

        return blocked

    for module, names in (
        (os, ("setsid", "setpgid", "setpgrp", "pidfd_open", "fork", "forkpty", "kill", "killpg")),
        (signal, ("pidfd_send_signal",)),
    ):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, not_allowed(f"{module.__name__}.{name}"))


def main():
    config, program_path = json.loads(sys.argv[1]), sys.argv[2]
    sys.dont_write_bytecode = True
    with open(program_path, encoding="utf-8") as handle:
        source = handle.read()
    _set_limits(config)
    layers = {"network_namespace": _new_network_namespace(), "dropped_to_user": None}
    dropped, reason = _drop_privileges(config.get("user"))
    if dropped:
        layers["dropped_to_user"] = config["user"]
    else:
        layers["not_dropped"] = reason
    _install_guards(os.getcwd())
    os.write(2, ("SANDBOX-LAYERS " + json.dumps(layers) + "\n").encode())
    module = types.ModuleType("__main__")
    module.__file__ = program_path
    sys.modules["__main__"] = module
    sys.argv = [program_path]
    code = compile(source, "program.py", "exec")
    exec(code, module.__dict__)


if __name__ == "__main__":
    main()
