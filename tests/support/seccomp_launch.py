"""Start a program the way a container runtime would under a seccomp profile file (Docker's format):
become `uid`, load the profile with libseccomp, then exec the program. Run by the system's Python
(`python3-seccomp`), since the virtualenv's has no libseccomp binding:

    /usr/bin/python3 seccomp_launch.py PROFILE UID -- ARGV...
"""

import contextlib
import json
import os
import sys

import seccomp  # type: ignore[import-not-found]

ACTIONS = {
    "SCMP_ACT_ALLOW": lambda rule: seccomp.ALLOW,
    "SCMP_ACT_ERRNO": lambda rule: seccomp.ERRNO(rule.get("errnoRet", 1)),
}


def main(profile_file: str, uid: int, argv: list[str]) -> None:
    with open(profile_file) as handle:
        profile = json.load(handle)
    if uid:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    syscalls = seccomp.SyscallFilter(defaction=ACTIONS[profile["defaultAction"]]({}))
    for rule in profile["syscalls"]:
        for name in rule["names"]:
            with contextlib.suppress(RuntimeError, ValueError):  # a call this architecture lacks
                syscalls.add_rule(ACTIONS[rule["action"]](rule), name)
    syscalls.load()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    separator = sys.argv.index("--")
    main(sys.argv[1], int(sys.argv[2]), sys.argv[separator + 1 :])
