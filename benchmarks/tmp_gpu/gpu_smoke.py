import sys, time, os
sys.path.insert(0, os.getcwd())
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), flush=True)
from evals.judge.zygote import Zygote
from evals.judge.sandbox import CandidateProcess, sandbox_available
print("sandbox", sandbox_available(), flush=True)
z = Zygote.start()
print("ready", z.wait_ready(), flush=True)
for sb in (sandbox_available(), False, sandbox_available()):
    t0 = time.monotonic()
    p = CandidateProcess.start(zygote=z, sandbox=sb)
    r = p.request("ping", {}, timeout_s=120)
    print("sandbox", sb, "forked", p.forked, "ping", round(time.monotonic() - t0, 2), r.get("result"), flush=True)
    p.finish()
print("zygote alive and ready after CUDA children:", z.is_ready(), flush=True)
z.close()
