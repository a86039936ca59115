import os
import tempfile
import time

import torch


@torch.compile
def f(x):
    return x + 1


f(torch.ones(2))
pid = os.fork()
if pid == 0:
    # an orphan that would outlive the run if the probe did not kill the process group
    time.sleep(600)
    os._exit(0)
with open(os.path.join(tempfile.gettempdir(), f"casekit-orphan-{os.environ.get('CASEKIT_TEST_TOKEN', 'x')}"), "a") as handle:
    handle.write(f"{pid}\n")
print("parent done")
