"""Is there a Java PySpark can start? (Spark 4 needs Java 17 or newer.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

MIN_JAVA = 17
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def java_problem() -> str | None:
    """None when the Java that PySpark would start is 17 or newer; else one line saying what
    is wrong. PySpark's launcher runs `$JAVA_HOME/bin/java` when JAVA_HOME is set, else `java`
    on the PATH; so does this check."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        where = f"JAVA_HOME={home}"
        if not os.access(java, os.X_OK):
            return f"Java {MIN_JAVA}+ is needed: {where} has no bin/java"
    else:
        found = shutil.which("java")
        if found is None:
            return (
                f"Java {MIN_JAVA}+ is needed: no `java` on the PATH and JAVA_HOME is not set "
                "(e.g. apt-get install openjdk-17-jre-headless)"
            )
        java, where = found, found
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Java {MIN_JAVA}+ is needed: cannot run {java}: {e}"
    m = _VERSION.search(done.stderr + done.stdout)
    if m is None:
        return f"Java {MIN_JAVA}+ is needed: cannot tell the version of {where}"
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_292" is Java 8
        major = int(m.group(2))
    if major < MIN_JAVA:
        return f"Java {MIN_JAVA}+ is needed: {where} is Java {major}"
    return None
