"""Is there a Java that Spark can start? Checked before Spark is, so a missing one is one line.

PySpark starts its JVM through `spark-submit`, which runs `$JAVA_HOME/bin/java` when
JAVA_HOME is set and `java` from PATH otherwise; without either it fails deep inside
PySpark with a long traceback that never says "install Java". Spark 4 needs Java 17 or
newer, so an older one is refused here too (when its version can be read at all).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

MIN_JAVA = 17
INSTALL_HINT = (
    f"Java {MIN_JAVA}+ is needed to run Spark "
    "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless; or set JAVA_HOME to a "
    f"Java {MIN_JAVA}+ install)"
)
_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


def find_java(env: Mapping[str, str] | None = None) -> str | None:
    """The java Spark would run: `$JAVA_HOME/bin/java` if JAVA_HOME is set, else PATH's."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java", path=env.get("PATH", os.defpath))


def java_problem(env: Mapping[str, str] | None = None) -> str | None:
    """None when Spark can start its JVM; else one line saying what is missing and the fix."""
    env = os.environ if env is None else env
    java = find_java(env)
    if java is None:
        where = (
            f"JAVA_HOME={env['JAVA_HOME']} has no bin/java"
            if env.get("JAVA_HOME")
            else "no java on PATH and JAVA_HOME is not set"
        )
        return f"{INSTALL_HINT}; {where}"
    major = java_major_version(java)
    if major is not None and major < MIN_JAVA:
        return f"{INSTALL_HINT}; {java} is Java {major}"
    return None


def java_major_version(java: str) -> int | None:
    """17 for `openjdk version "17.0.15"`, 8 for `"1.8.0_402"`; None if it cannot be told."""
    try:
        answer = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION_RE.search(answer.stderr + answer.stdout)
    if match is None:
        return None
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    return minor if major == 1 else major  # Java 8 and older say 1.8, 1.7, ...
