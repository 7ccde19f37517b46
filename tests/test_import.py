"""`import paths` as a program's first line sees it: Ctrl-C while the C core initializes is a
KeyboardInterrupt, as anywhere else, not an ImportError ("initialization failed")."""

import signal
import subprocess
import sys
import time

TRIALS = 30
FIRST_S, STEP_S = 0.015, 0.002  # Ctrl-C from 15 ms to 73 ms after the start: the core loads in there


def test_ctrl_c_while_paths_imports_is_a_keyboard_interrupt():
    said = set()
    for trial in range(TRIALS):
        child = subprocess.Popen([sys.executable, "-c", "import paths, time; time.sleep(2)"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(FIRST_S + trial * STEP_S)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        said.add(err.strip().splitlines()[-1] if err.strip() else "")
    assert not any("ImportError" in line for line in said), said
