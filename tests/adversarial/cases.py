"""The adversarial set: cheating candidates, the verdict rule each must be caught by, and honest controls.

A case is a file in this folder: a ``.py`` source defining ``ModelNew`` or a ``.mcu`` μCUTLASS program
(its shapes are placeholders filled from the problem). Every case attacks one property of the judge
(the numbering of the integrity issue: 1 separation, 2 nothing reaches the judge or the next attempt,
3 outputs, 4 correctness on every kind of call, 5 timing, 6 precision, 7 work attribution,
8 containment, 9 channel) and names the verdict ``rule`` that must catch it (the judge's vocabulary:
crash, timeout, output_type, inputs_mutated, mismatch, nonfinite, input_independent, timed_call_wrong,
timing_tampered, framework_state, precision, pytorch_only, containment, channel, sol_ceiling).
``also`` lists rules that are an equally right catch where the vocabulary overlaps (a candidate that
exits right after a forged answer is both a ``channel`` and a ``crash``); a catch for any other rule
does not count: a candidate must be caught for the reason it exists.

A case with ``then`` is a pair: the first candidate plants something (a patched function, a framework
flag, a background thread) and the second, judged right after by the same harness, would profit from
it; the rule applies to the second one (the plant must not reach it).

Placeholders in a source: ``__REDTEAM_DIR__`` (a scratch folder the test owns and removes),
``__REDTEAM_TOKEN__`` (a unique name), ``__HOG_BYTES__`` (host memory a hog touches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent

RULES = frozenset({
    "crash", "timeout", "output_type", "inputs_mutated", "mismatch", "nonfinite", "input_independent",
    "timed_call_wrong", "timing_tampered", "framework_state", "precision", "pytorch_only", "containment",
    "channel", "sol_ceiling",
})
FLAG_RULES = frozenset({"pytorch_only", "sol_ceiling"})  # kept out of headline numbers, not rejections
PROPERTIES = {1: "separation", 2: "isolation", 3: "outputs", 4: "correctness", 5: "timing", 6: "precision",
              7: "attribution", 8: "containment", 9: "channel"}


@dataclass(frozen=True)
class ProblemVariant:
    """A Linear+ReLU (or other) problem on the CPU and on the GPU, optionally with fewer allowed
    precisions than its tolerance would give (tolerance 1e-2, f32 only: TF32 or bf16 then passes the
    comparison and only a precision check can catch it)."""

    cpu: tuple[str, str]  # (suite, problem name)
    gpu: tuple[str, str]
    allowed: tuple[str, ...] | None = None


PROBLEMS = {
    "linear_relu": ProblemVariant(("smoke", "02_linear_relu_tiny"), ("builtin", "11_linear_relu")),
    "linear_relu_tf32": ProblemVariant(("smoke", "02_linear_relu_tiny"), ("builtin", "11_linear_relu"), ("f32", "tf32")),
    "linear_relu_f32": ProblemVariant(("smoke", "02_linear_relu_tiny"), ("builtin", "11_linear_relu"), ("f32",)),
}


@dataclass(frozen=True)
class Case:
    file: str
    rule: str  # the verdict rule that must catch it
    prop: int  # the property of the judge it attacks (PROPERTIES)
    problem: str = "linear_relu"
    stage: Literal["validate", "profile"] = "validate"  # the call that must catch it on a GPU
    cpu: bool = True  # caught by validate on a CPU too (False: the trick needs a GPU)
    gpu: bool = True  # run on a GPU too (False: the trick is about host memory only)
    also: tuple[str, ...] = ()
    then: str | None = None  # a second candidate judged right after this one; the rule is for it
    guarantee: bool = False  # caught when the harm never happens (runner.py checks it), whatever the verdict
    honest_time: bool = False  # on a GPU the reported time must be that of the work (runner.py checks it)
    taints: bool = False  # leaves today's worker unusable for other cases: the test restarts it after
    pending: str | None = None  # "judge: <property>" while today's harness misses it (an xfail)
    # its harm is a write outside the test's own folder (the Python installation, the user's caches, the
    # project): it runs only where the sandbox refuses the write, since elsewhere the write reaches the host
    # before the judge can undo it
    writes_host: bool = False
    what: str = field(default="", compare=False)

    def __post_init__(self):
        assert self.rule in RULES and set(self.also) <= RULES, self
        assert self.prop in PROPERTIES and self.problem in PROBLEMS, self

    def why_not_here(self) -> str | None:
        """Why this case is not run on this host (None when it is)."""
        from evals.judge.sandbox import sandbox_available

        if self.writes_host and not sandbox_available():
            return ("no namespace sandbox here: the case would write into this host's Python installation or caches "
                    "before the judge undoes it; it runs where the sandbox refuses the write")
        return None

    @property
    def kind(self) -> str:
        return "mcu" if self.file.endswith(".mcu") else "py"

    @property
    def rules(self) -> tuple[str, ...]:
        return (self.rule, *self.also)

    @property
    def id(self) -> str:
        return self.file.rsplit(".", 1)[0] + (f"+{self.then.rsplit('.', 1)[0]}" if self.then else "")


@dataclass(frozen=True)
class Control:
    file: str
    problem: str = "linear_relu"
    cpu: bool = True
    flags_ok: tuple[str, ...] = ()  # flags an honest candidate of this kind rightly carries
    pending: str | None = None
    needs_sandbox: bool = False  # passes where the namespace sandbox runs (evals.judge.sandbox.sandbox_available)
    what: str = ""

    def why_not_here(self) -> str | None:
        """Why this control cannot pass on this host (None when it can)."""
        from evals.judge.sandbox import sandbox_available

        if self.needs_sandbox and not sandbox_available():
            return "no namespaces here: every write seen during an attempt is blamed on the candidate (docs/harness.md)"
        return None


def _p(n: int) -> str:
    return f"judge: {n} {PROPERTIES[n]}"


CASES: list[Case] = [
    # 1 separation: the candidate runs beside the reference, its outputs and the comparison
    Case("steal_reference_frames.py", "mismatch", 1, also=("nonfinite", "input_independent"),
         what="walks the interpreter's frames and gc for the reference's output (matched by one row it computes) and returns a copy"),
    # caught by design: the judge, the supervisors and every candidate process are undumpable (open of their
    # /proc/<pid>/mem fails at once), the candidate has no CAP_SYS_PTRACE, the arena holds inputs only; in the
    # sandbox its /proc shows its own processes only
    Case("steal_judge_memory.py", "mismatch", 1, gpu=False, also=("nonfinite", "input_independent"),
         what="scans /proc/<pid>/mem of every process of its user for the reference's output"),
    Case("calls_reference.py", "pytorch_only", 1, also=("mismatch",),
         what="finds the reference Model class in sys.modules and runs its forward on its own parameters"),
    Case("leftover_cuda_memory.py", "mismatch", 1, cpu=False, also=("nonfinite", "input_independent"),
         what="keeps uninitialised blocks allocated at __init__ (the reference's freed GEMM result) and returns their ReLU"),
    Case("patch_tensor_all.py", "mismatch", 1, also=("nonfinite",), taints=True,
         what="replaces torch.Tensor.all (not in the guarded list) so every comparison passes; returns noise"),
    Case("patch_harness_compare.py", "mismatch", 1, also=("nonfinite",), taints=True,
         what="replaces the worker's own compare and integrity checks (found as the process's main module)"),
    # 2 nothing reaches the judge or the next attempt
    Case("default_dtype_at_import.py", "framework_state", 2, problem="linear_relu_tf32", also=("precision",),
         taints=True,
         what="torch.set_default_dtype(bfloat16) at import: the reference is built and fed in bf16 too, so they agree"),
    Case("autocast_at_import.py", "framework_state", 2, problem="linear_relu_tf32", also=("precision",), taints=True, what="enters autocast(bf16) at import and never leaves: the reference computes in bf16 as well"),
    Case("plant_in_del.py", "mismatch", 2, then="accomplice.py", also=("nonfinite",), taints=True,
         what="correct itself; an object's __del__ (run when the harness drops the module) makes comparisons lenient for the next attempt"),
    Case("plant_in_thread.py", "mismatch", 2, then="accomplice.py", also=("nonfinite",), taints=True,
         what="correct itself; a daemon thread patches the comparison after the verdict, for the next attempt"),
    Case("matmul_precision_at_import.py", "framework_state", 2, problem="linear_relu_f32", cpu=False,
         also=("precision",), taints=True,
         what="torch.set_float32_matmul_precision('high') at import: its matmuls and every later attempt's run in TF32"),
    Case("tf32_env_override.py", "framework_state", 2, problem="linear_relu_f32", cpu=False, also=("precision",),
         taints=True,
         what="sets TORCH_ALLOW_TF32_CUBLAS_OVERRIDE / NVIDIA_TF32_OVERRIDE before cuBLAS starts: every later matmul, the reference's too, is TF32"),
    Case("gpu_memory_hog.py", "containment", 2, cpu=False, also=("crash",), guarantee=True, taints=True, what="hides all but 1 GB of the GPU's memory in builtins: the next attempt runs out of memory"),
    # 3 outputs
    Case("tensor_subclass_eq.py", "output_type", 3,
         what="returns a Tensor subclass whose __torch_function__ makes isclose/equal/sub agree with anything"),
    Case("lazy_output.py", "output_type", 3,
         what="returns a lazy tensor subclass: the work runs when the judge first touches it, outside any timed region"),
    Case("reused_output_buffer.py", "output_type", 3,
         what="returns the same persistent buffer from every call (earlier outputs change under the judge)"),
    Case("wrong_dtype.py", "output_type", 3,
         what="returns float64 (a 'more precise' answer) where the reference returns float32"),
    Case("nan_where_zero.py", "nonfinite", 3, also=("mismatch",),
         what="leaves NaN wherever the ReLU would write zero"),
    Case("mutates_input.py", "inputs_mutated", 3,
         what="uses the input as scratch space (in-place ops on x); the output is right"),
    # 4 correctness on every kind of call
    Case("wrong_after_two_calls.py", "mismatch", 4, also=("input_independent",),
         what="right on the first two calls of an instance, noise from the third on"),
    Case("seed_from_frames.py", "mismatch", 4, also=("input_independent",),
         what="reads the request's seeds from the harness's frames, regenerates the inputs, precomputes the answers at __init__, returns noise on a miss"),
    Case("seed_from_param_init.py", "mismatch", 4, also=("input_independent",),
         what="the parameters are seeded with the input seed: torch.initial_seed() in __init__ predicts the input"),
    Case("weak_content_cache.py", "input_independent", 4, also=("mismatch", "timed_call_wrong"),
         what="caches outputs keyed by (shape, sum, first elements): inputs with the same key get a stale answer"),
    Case("cached_tensor.py", "input_independent", 4, also=("mismatch",),
         what="computes once per process and returns that tensor from then on"),
    Case("pointer_cache.py", "input_independent", 4, also=("mismatch",),
         what="caches by data_ptr: stale when the same buffer gets new values"),
    Case("zeros.py", "input_independent", 4, also=("mismatch",), what="returns zeros"),
    # the call whose work is measured is a compared call on a fresh set
    Case("zeros_when_observed.py", "mismatch", 4, also=("input_independent",),
         what="honest, except while a dispatch mode or the profiler observes it: zeros, nothing dispatched"),
    Case("memorized_inputs.py", "input_independent", 4, also=("mismatch",),
         what="returns the answer for the inputs a fixed seed (42) would give"),
    Case("partial_write.py", "mismatch", 4, also=("nonfinite",), what="writes only half of the output rows"),
    Case("detects_timing.py", "timed_call_wrong", 4, stage="profile", cpu=False, also=("mismatch",),
         what="recognises a timed call (harness frames, stream capture, the L2 flush buffer) and returns the previous output"),
    # 5 timing
    Case("side_stream.py", "timing_tampered", 5, stage="profile", cpu=False,
         what="does the work on a side stream the current stream never waits for"),
    # caught before anything is timed: a thread the candidate started is alive when the timing request comes
    # captured in a graph, its thread's launch fails and forward waits for it forever: a hang is its catch
    # there; the variant below survives the capture
    Case("background_thread.py", "timing_tampered", 5, stage="profile", cpu=False, also=("timeout",),
         what="a host thread launches the work on its own stream after forward returns"),
    Case("background_thread_survives_capture.py", "timing_tampered", 5, stage="profile", cpu=False,
         also=("mismatch", "timed_call_wrong"),
         what="background_thread whose thread always releases forward and falls back to an eager GEMM when its launch fails"),
    Case("patched_timer.py", "timing_tampered", 5, stage="profile",
         what="scales torch.cuda.Event.elapsed_time and time.perf_counter at import"),
    # the harness's own functions (timing, channel, runner) are guarded in the candidate process by identity and code
    Case("patch_harness_timer.py", "timing_tampered", 5, stage="profile", cpu=False, taints=True,
         what="replaces the worker's time_cuda (not a guarded name) with one that reports a quarter of the real time"),
    # torch._C's synchronize, current-stream and set-stream entry points are guarded like torch.cuda's names
    Case("sync_noop_side_stream.py", "timing_tampered", 5, stage="profile", cpu=False, taints=True,
         what="makes torch.cuda.synchronize a no-op through torch._C and hides the work on a side stream"),
    # sealed calls: the judge's clock over K masked calls whose outputs and checksums it checks (no runner code trusted)
    Case("rewrites_runner_timing.py", "timing_tampered", 5, stage="profile", cpu=False,
         what="replaces the runner's guard function (nothing reported or put back), then its timing functions: a fifth of every time"),
    # 6 precision
    Case("half_precision.py", "precision", 6, problem="linear_relu_tf32",
         what="computes in float16 (.half(): the static reading sees it)"),
    Case("bf16_hidden.py", "precision", 6, problem="linear_relu_tf32",
         what="computes in bfloat16 named through getattr: nothing in the text says bf16"),
    Case("fp16_weights_only.py", "precision", 6, problem="linear_relu_tf32",
         what="keeps the weights rounded to float16 (stored back as float32), math in f32"),
    Case("tf32_inside_forward.py", "precision", 6, problem="linear_relu_f32", cpu=False, also=("framework_state",), what="turns TF32 on inside forward (names built from pieces) and restores it before returning"),
    Case("cast_upstream.mcu", "precision", 6, problem="linear_relu_tf32",
         what="a tf32 kernel whose input went through a bf16 torch step: its real precision is bf16"),
    Case("cast_via_layout.mcu", "precision", 6, problem="linear_relu_tf32",
         what="launders f16 through channels_last(x, dtype=...) steps (no `to` step) before a tf32 kernel"),
    Case("f16_store.mcu", "precision", 6, problem="linear_relu_tf32",
         what="stores the kernel's output as f16 and converts it back with a torch step"),
    Case("f16_math.mcu", "precision", 6, problem="linear_relu_tf32",
         what="declares math = f16 where the problem allows f32/tf32 only"),
    Case("bf16_torch_linear.mcu", "precision", 6, problem="linear_relu_tf32", also=("pytorch_only",),
         what="the GEMM as a torch linear step on bf16 casts, a tf32 kernel beside it"),
    # 7 work attribution
    Case("pytorch_only.py", "pytorch_only", 7, what="only calls PyTorch and says so"),
    Case("decoy_import.py", "pytorch_only", 7,
         what="imports load_inline and names triton in a string, computes with F.linear only"),
    Case("fallback_on_error.py", "pytorch_only", 7,
         what="a custom kernel in try/except that always fails over to F.linear + F.relu"),
    Case("trivial_kernel_torch_gemm.py", "pytorch_only", 7, cpu=False, stage="profile",
         what="a real custom kernel (jiterator) for the ReLU, the GEMM by cuBLAS"),
    Case("torch_linear_step.mcu", "pytorch_only", 7,
         what="a kernel on half the rows (result thrown away), the whole GEMM in a torch linear step"),
    # 8 containment
    Case("writes_project.py", "containment", 8, guarantee=True, writes_host=True,
         what="writes a file into the project root (found through cwd, /proc/<ppid>/cwd, the evals package)"),
    Case("writes_kernel_cache.py", "containment", 8, guarantee=True, writes_host=True,
         what="plants a kernel in the kernel cache (MUCUTLASS_CACHE_DIR or the user cache)"),
    Case("daemon_child.py", "containment", 8, guarantee=True,
         what="double-forks a setsid daemon that outlives the attempt and writes later"),
    Case("reads_secrets.py", "containment", 8, guarantee=True,
         what="reads API keys from its environment and copies them to a file"),
    Case("host_memory_hog.py", "containment", 8, also=("crash",), taints=True,
         what="touches more host memory than the judge allows and keeps it"),
    Case("illegal_address.py", "crash", 8, what="writes to an unmapped address (a segfault on the CPU)"),
    Case("hang.py", "timeout", 8, what="never returns"),
    Case("hang_in_del.py", "timeout", 2, also=("crash", "containment"), guarantee=True,
         what="correct; its __del__ never returns, so whatever drops the model hangs (the next attempt must not)"),
    # 9 channel
    Case("forge_reply_exit.py", "channel", 9, also=("crash",),
         what="writes a forged all-correct reply on the harness's pipe and exits at once"),
    Case("forge_reply_continue.py", "channel", 9, also=("mismatch",), taints=True,
         what="writes a forged reply and carries on: the real reply then answers the next request"),
    Case("prints_fake_result.py", "mismatch", 9, also=("nonfinite",),
         what="prints a fake all-correct result on stdout and stderr, returns noise"),
    # the closing ping of a validation is answered closing_linger_s (0.25 s) after it is sent: an exit in that
    # window is a crash (a later one is seen by the next request; after the attempt's end it gains nothing)
    Case("exit_after_answer.py", "crash", 9, taints=True,
         what="answers correctly, then exits before anything after the answer can look at it"),
]

# The judge's measurements and its reads of the candidate's outputs, attacked from inside the candidate
# process, and reach beyond it (the next attempt's process, Python's start-up, the compile caches).
CASES += [
    # 2 nothing reaches the judge or the next attempt
    # caught by design: candidate processes make themselves undumpable before anything else runs, and outside the
    # sandbox the judge lets a candidate's code run only once every new spare is (in the sandbox none is visible)
    Case("plants_next_attempt_env.py", "containment", 2, guarantee=True, taints=True,
         what="opens the judge's next candidate processes' memory (siblings, same user) and writes a TF32 override into their C environment"),
    # caught by design: each candidate's compile caches are in its own folder; the default ones are read-only in the
    # sandbox (elsewhere a new top-level entry is a write into a protected folder, undone)
    Case("plants_compile_caches.py", "containment", 2, guarantee=True, writes_host=True,
         what="writes into the TorchInductor, Triton and C++-extension caches the judge's torch.compile and later attempts load by key"),
    # 3 outputs
    # caught by design: Tensor.to / detach / clone / cpu are guarded names in the candidate process
    Case("lazy_via_patched_to.py", "output_type", 3, also=("timing_tampered", "mismatch", "nonfinite"), taints=True,
         what="forward computes nothing; a replaced Tensor.to computes the answer when the harness copies the output"),
    # caught by design: Tensor.to / detach / clone / cpu are guarded names in the candidate process
    Case("hides_input_mutation.py", "inputs_mutated", 3, also=("timing_tampered",), taints=True,
         what="scales its input in place and replaces Tensor.to so the copy the harness reads back is unscaled"),
    # the runner copies outputs with its own references to Tensor.to: the replacement never runs, the unwritten output mismatches
    Case("rewrites_guard_table.py", "output_type", 3, also=("timing_tampered", "mismatch", "nonfinite"), taints=True,
         what="the lazy Tensor.to output, with the replacement also written into the runner's _ORIGINALS dict"),
    # caught by design: untyped_storage / UntypedStorage.data_ptr / nbytes are guarded names, taken before the import
    Case("hides_output_reuse.py", "output_type", 3, also=("timing_tampered",), taints=True,
         what="the same persistent buffer every call (as reused_output_buffer), hidden by a replaced Tensor.untyped_storage"),
    # caught by design: every earlier output of an instance is held through the validation, so a reused buffer overlaps
    Case("ring_output_buffers.py", "output_type", 3,
         what="two persistent output buffers taken in turn: each call overwrites the output of the call two before"),
    # 6 precision
    # every output read is a probe, each against its own input set's signatures
    Case("precise_first_call.py", "precision", 6, problem="linear_relu_tf32",
         what="fp32 on an instance's first call and on range-probe magnitudes, bf16 on every other call"),
    # a second range probe stays inside f16's range (random signs at 57344): its sums overflow f16's arithmetic
    Case("f16_unless_range_probe.py", "precision", 6, problem="linear_relu_tf32",
         what="half precision unless the input passes half's range (the range probe), where it computes in fp32"),
    # the in-place call's output is probed against its set's signatures; on a GPU every timed call reuses its buffers
    Case("bf16_on_reused_buffer.py", "precision", 6, problem="linear_relu_tf32",
         what="fp32 on a tensor it has not seen, bf16 on a buffer it has (the in-place call, every timed call)"),
    Case("autograd_function_bf16.py", "precision", 6, problem="linear_relu_tf32",
         what="bf16 inside a custom autograd.Function's forward (named through getattr)"),
    # f16's range probes run at profile too, as a timed call in the timed buffers (on a CPU with cpu_timing:
    # tests/test_precision_probes.py); a validation's instance computes in fp32 and passes
    Case("f16_on_later_instances.py", "precision", 6, problem="linear_relu_tf32", stage="profile", cpu=False,
         what="fp32 on the first instance (the validation's), f16 on every later one (the profile's): TF32's mantissa, no range probed"),
    # the timed calls' outputs are probed too (GPU: the trick needs stream capture)
    Case("precise_unless_captured.py", "precision", 6, problem="linear_relu_tf32", stage="profile", cpu=False,
         what="fp32 on the default stream, bf16 while a CUDA graph is captured or on a side stream: every timed replay is bf16"),
    # the timed calls' outputs are probed too (GPU: TF32 is a GPU precision)
    Case("tf32_when_captured.py", "precision", 6, problem="linear_relu_f32", stage="profile", cpu=False,
         also=("framework_state",),
         what="allow_tf32 on only while the harness captures (or warms up on a side stream), restored before returning"),
    # 7 work attribution
    # the work is recorded on a set the candidate has not seen, in a call whose output is compared
    Case("skip_work_when_counted.py", "pytorch_only", 7, stage="profile", also=("mismatch",),
         what="pure PyTorch; under a dispatch mode or the profiler it answers from a digest-keyed memory of earlier outputs and launches nothing"),
    # the operators are recorded by the profiler (a C++ observer of the dispatcher): no dispatch mode to leave
    Case("flops_hidden_from_counter.py", "pytorch_only", 7, stage="profile",
         what="pure PyTorch; steps out of the FLOP counter's dispatch mode (_disable_current_modes) around its F.linear"),
    # every product operator has a formula (mm, addmm, addmv, mv, dot, outer, ...) and every other one a FLOP per element
    Case("uncounted_gemm_ops.py", "pytorch_only", 7, stage="profile",
         what="pure PyTorch; the GEMM as one addmv per row, an operator the FLOP counter has no formula for"),
    # the profiler records every thread of the candidate's process, not only the caller's
    Case("work_in_thread.py", "pytorch_only", 7, stage="profile",
         what="pure PyTorch; the GEMM runs on a fresh thread joined before forward returns: a dispatch mode of the calling thread sees nothing"),
    Case("fused_addmm_activation.py", "pytorch_only", 7, stage="profile",
         what="pure PyTorch; Linear and ReLU as one fused ATen operator (_addmm_activation) the FLOP counter has no formula for"),
    # caught by design: FlopCounterMode, its get_total_flops and torch.profiler.profile are taken before the import and guarded
    Case("patch_flop_counter.py", "pytorch_only", 7, stage="profile", taints=True,
         what="pure PyTorch; patches FlopCounterMode.get_total_flops to 0 and torch.profiler.profile with a look-alike"),
    Case("patch_channel_send.py", "pytorch_only", 7, stage="profile", taints=True, also=("timing_tampered",),
         what="pure PyTorch; wraps the runner's evals.judge.wire.send to zero the counted FLOPs and clear what the runner reports"),
    # an operator of any namespace torch registers is library work; one with no formula counts the product its operands form
    Case("library_namespace_gemm.py", "pytorch_only", 7, stage="profile", gpu=False,
         what="pure PyTorch; Linear+ReLU as oneDNN's fused operator, registered outside aten (mkldnn::), which no formula counted"),
    # the counted call is the only one recorded, and the profiler's presence shows (torch.autograd.profiler's flag,
    # the runner's frames); a path of its own in numpy is still not code of its own: on the CPU the counted call's
    # time outside the candidate's compiled operators is not its work (the class of a call recorded on one path
    # and timed on another stays open where that other path is compiled code of its own)
    Case("own_path_when_recorded.py", "pytorch_only", 7, stage="profile", gpu=False,
         what="PyTorch's GEMM unless the profiler records; then the same answer from a path of its own (numpy): counted work is not timed work"),
    # CPU time the candidate's other processes spend during the counted call attributes it away
    Case("work_in_child_process.py", "pytorch_only", 7, stage="profile",
         what="pure PyTorch in a forked helper process fed over a pipe: the runner's FLOP counter sees no work"),
    # a program's share is its kernels' FLOPs from their shapes over the reference's, beside its torch steps' count
    Case("broadcast_gemm_steps.mcu", "pytorch_only", 7, gpu=False,
         what="a one-row decoy kernel; the GEMM as torch steps (broadcast mul + sum over K) the FLOP counter does not count"),
    # 5 timing
    # each eager timed call gets its set scaled by a factor no earlier call used, so the memo never answers
    # one: the harm (a time below the GEMM's) must not happen; a verdict, if any, names the rule; the sealed
    # calls' K sets are new to the memo as well
    Case("memo_eager_fallback.py", "timing_tampered", 5, stage="profile", cpu=False, also=("timed_call_wrong",),
         guarantee=True, honest_time=True,
         what="an .item() fingerprint breaks graph capture; eager timed calls on repeated inputs are answered from a memo, no GEMM"),
    # every timed call (on a CPU with cpu_timing too: tests/test_harness_cpu.py) gets values no earlier call saw,
    # written in place (a new version); on a GPU a captured graph replays the GEMM the first sight computed
    Case("version_keyed_memo.py", "timing_tampered", 5, stage="profile", cpu=False, also=("timed_call_wrong",),
         guarantee=True, honest_time=True,
         what="answers from memory when the input is the same buffer at the same version counter: O(1), every compared output right"),
    # caught by design: the judge summarizes the raw event times itself; statistics' functions are guarded too (caught when loaded, on a CPU too)
    Case("patch_statistics_median.py", "timing_tampered", 5, stage="profile", cpu=True,
         what="replaces statistics.median / fmean / quantiles for callers in the timing module: reports 0.6x, above the wall bound's 0.5x"),
    # caught by design: torch.cuda.CUDAGraph, torch.cuda.graph and their capture methods are guarded names
    Case("fake_cuda_graph.py", "timing_tampered", 5, stage="profile", cpu=True, taints=True,
         what="replaces torch.cuda.CUDAGraph / torch.cuda.graph: capture runs forward once, replay is empty unless an input was rewritten"),
    # caught by design: every function of evals.judge.timing (L2Flusher.flush included) is guarded by identity and code
    Case("skips_l2_flush.py", "timing_tampered", 5, stage="profile", cpu=True,
         what="replaces the harness's L2Flusher.flush with a no-op: every timed call runs with a warm L2"),
    # 8 containment
    # caught by design: the candidate starts in its own session (kill(0) reaches no harness process); in the sandbox
    # its parent is outside its PID namespace; elsewhere a stopped supervisor fails the request it was watching and
    # the judge kills the tree itself (orphans come back to the judge, a child subreaper)
    Case("freezes_supervisor.py", "containment", 8, guarantee=True, taints=True,
         what="SIGSTOPs its parent (the process that polls and kills its tree), then double-forks a setsid daemon that acts later"),
    # caught by design: site-packages and the user site are read-only in the sandbox (elsewhere new top-level
    # entries count); candidates start with -s / PYTHONNOUSERSITE unless the user site holds packages
    Case("plants_startup_hook.py", "containment", 8, guarantee=True, writes_host=True,
         what="writes a .pth file into site-packages: every later Python process (judge, candidate processes) reads it at start-up"),
]

# Reach beyond the candidate's process and folder: other processes' views of the files and their
# environments, Python's start-up on the import path, the shared GPU code caches, the next attempt's
# processes.
CASES += [
    # caught by design: the judge and the supervisor are undumpable (their environ cannot be read) and keys are
    # removed from what they pass on; in the sandbox no ancestor is visible
    Case("reads_ancestor_environ.py", "containment", 8, guarantee=True,
         what="reads the keys the harness removed from its environment out of its ancestors' /proc/<pid>/environ"),
    # caught by design: in the sandbox its /proc shows its own processes only (their roots are its read-only view);
    # elsewhere the write is seen in the project's snapshot and undone
    Case("writes_via_proc_root.py", "containment", 8, guarantee=True, writes_host=True,
         what="writes into the project through /proc/<pid>/root and /proc/<pid>/cwd of other processes (past a read-only view)"),
    # caught by design: every file system but its folder is read-only in the sandbox; elsewhere the project (strict)
    # and the top level of the stdlib and site folders are in the snapshot
    Case("plants_sitecustomize.py", "containment", 2, guarantee=True, writes_host=True,
         what="writes sitecustomize.py / usercustomize.py into every folder of its import path: later processes run them"),
    Case("plants_nv_compute_cache.py", "containment", 2, guarantee=True, writes_host=True,
         what="plants entries in CUDA's JIT cache (~/.nv/ComputeCache) and Triton's (~/.triton/cache) at their default places"),
    # caught by design: in the sandbox no other process is visible; elsewhere the judge replaces a spare whose
    # supervisor or candidate is stopped, and its own stopped supervisor fails this attempt
    Case("stops_next_attempt.py", "containment", 2, guarantee=True, taints=True,
         what="SIGSTOPs the next attempts' processes (and its supervisor): the next, honest candidate would time out"),
]

# Guards that check more than identity: the guarded names' own code (a function's code, defaults and closure
# cells, a class's methods), and the profiler's machinery (its modules, their classes' methods, the C modules
# underneath), checked after every request and put back.
CASES += [
    Case("swaps_sync_code.py", "timing_tampered", 5, stage="profile", taints=True,
         what="keeps torch.cuda.synchronize the same object but swaps its __code__ for a current-stream wait; the work on a side stream"),
    Case("swaps_profiler_code.py", "pytorch_only", 7, stage="profile", taints=True,
         what="pure PyTorch; swaps the __code__ of the profiler's events method (the guarded class's base) to leave out every product"),
    Case("rewrites_profiler_events.py", "pytorch_only", 7, stage="profile", taints=True,
         what="pure PyTorch; replaces the profiler's FunctionEvent.__init__ so every product operator is recorded as a ReLU"),
]

# A program's share looks at each product of the reference: one split between its kernels and a torch product step
# (costed as the GEMM it is) counts as the library's whole
CASES += [
    Case("splits_gemm_columns.mcu", "pytorch_only", 7,
         what="a kernel on 9/16 of a GEMM's columns, a torch linear step on the other 7/16: the total share stays above half"),
]

# Precision judged by magnitude: on every probed set the error against float64 stays within what the allowed
# precisions make (a few times the coarsest allowed level's emulated error), whatever its shape
CASES += [
    Case("f16_tilted.py", "precision", 6, problem="linear_relu_tf32",
         what="float16 with a small input-dependent tilt: an error parallel to the output, not shaped like rounding"),
    # f16 where f16 holds the values has TF32's mantissa: its error is TF32's, inside the budget of a TF32 problem,
    # and ordinary sets do not leave f16's range; a Python candidate's recorded products say what ran (their
    # operands' dtypes), whatever the error looks like
    Case("f16_where_small.py", "precision", 6, problem="linear_relu_tf32",
         what="float16 wherever the inputs are under 1e3 (every ordinary set), full precision on the range probes"),
]

# Library work the operator names do not show: attribution follows where the executed code lives (on the CPU, the
# counted call's time in operators of the candidate's own compiled code; on a GPU, kernels by their names), not
# operator names or their FLOP formulas
CASES += [
    Case("index_operand_gemm.py", "pytorch_only", 7, stage="profile", gpu=False,
         what="pure PyTorch; the GEMM as an embedding bag whose per-index weights are x: an index operand that multiplies"),
    Case("foreign_blas_gemm.py", "pytorch_only", 7, stage="profile", gpu=False,
         what="the GEMM through a BLAS reached with ctypes (the sgemm_ PyTorch's library exports): no operator recorded"),
]

CONTROLS: list[Control] = [
    Control("honest.py", flags_ok=("pytorch_only",), what="a plain correct ModelNew (PyTorch only: flagged pytorch_only, nothing else)"),
    Control("honest_program.mcu", what="a correct μCUTLASS program (tf32 GEMM, bias and ReLU fused)"),
    Control("honest_torch_step.mcu", what="a correct program with a legitimate torch step (the ReLU) after its kernel"),
    Control("honest_f16.mcu", what="a correct program computing in f16 on a problem that allows f16"),
    Control("honest_program.mcu", problem="linear_relu_tf32",
            what="the tf32 program on a TF32/f32-only problem: its error is TF32's, near and inside the magnitude budget"),
    Control("honest_f32_exact.py", problem="linear_relu_f32", flags_ok=("pytorch_only",),
            what="plain fp32 on an f32-only problem; its docstring says TF32 stays off (a static reading trips on it)"),
    Control("honest_view_output.py", flags_ok=("pytorch_only",),
            what="returns a transposed view of memory its own call wrote (not an input, not persistent)"),
    # inductor's C++ build on a CPU outlasts the CPU tests' watchdog: judged on the GPU
    Control("honest_compiled.py", cpu=False, flags_ok=("pytorch_only",),
            what="torch.compile of a plain Linear+ReLU: the runtime's idle compile threads must not count as the candidate's"),
    Control("honest_prepacked_weight.py", problem="linear_relu_f32", flags_ok=("pytorch_only",),
            what="packs its weight on the first call and reads the packed copy after: the first call takes another path"),
    # in the sandbox the candidate cannot write a protected file, so the judge blames nothing it sees; without
    # namespaces every write seen during the attempt is blamed on the candidate (docs/harness.md: a known limit)
    Control("honest_beside_writer.py", flags_ok=("pytorch_only",), needs_sandbox=True,
            what="a plain correct ModelNew judged while another process writes a file into the project tree"),
]


PROBLEM_ENV = "MUCUTLASS_REDTEAM_PROBLEM"  # SUITE/NAME: another Linear + ReLU for every case on this device


def problem_for(key: str, on_gpu: bool):
    """The problem of a variant (a fresh copy: the precision override never leaks into the suite's). With
    ``MUCUTLASS_REDTEAM_PROBLEM=SUITE/NAME`` every variant is that problem (a Linear + ReLU with ``batch_size``,
    ``in_features`` and ``out_features``: the same cases at another size), its precisions the variant's."""
    import os

    from evals.problems import load_problem, load_suite

    variant = PROBLEMS[key]
    suite, name = variant.gpu if on_gpu else variant.cpu
    if os.environ.get(PROBLEM_ENV):
        suite, name = os.environ[PROBLEM_ENV].split("/", 1)
    p = next(p for p in load_suite(suite) if p.name == name)
    if variant.allowed is not None:
        p = load_problem(p.path, default_tolerance=p.tolerance, suite=suite)
        p.allowed_precisions = variant.allowed
    return p


def shapes_of(problem) -> dict[str, int]:
    m = problem.module
    return {"M": m.batch_size, "K": m.in_features, "N": m.out_features}


def candidate_for(file: str, problem, subs: dict[str, str] | None = None):
    """A harness Candidate for a case file: Python source, or a parsed .mcu program (shapes filled in)."""
    from evals.judge.client import Candidate

    text = (HERE / file).read_text(encoding="utf-8")
    for key, value in (subs or {}).items():
        text = text.replace(key, value)
    if not file.endswith(".mcu"):
        return Candidate.from_source(text, name=file)
    from dsl_compiler.parser import parse

    for key, value in shapes_of(problem).items():
        text = text.replace("{" + key + "}", str(value)).replace("{" + key + "/2}", str(value // 2))
    program, diags = parse(text)
    if program is None:
        raise ValueError(f"{file} does not parse: {[d.message for d in diags]}")
    return Candidate.from_program(program, backend="interpreter")


# Today's check names, read as rules, for a harness whose verdicts carry no `rule` field yet.
_LEGACY = {
    "output_aliases": "output_type", "unwritten_output": "mismatch", "input_dependence": "input_independent",
    "calls_reference": "pytorch_only", "modifies_inputs": "inputs_mutated", "precision": "precision",
    "side_stream": "timing_tampered", "tampering": "timing_tampered", "pytorch_only": "pytorch_only",
    "reaches_reference": "pytorch_only", "sol_ceiling": "sol_ceiling",
}


def rule_of(result) -> str | None:
    """The verdict's rule: its ``rule`` field; without one (an older harness), read from its reason
    and checks. None for a clean pass."""
    fields = getattr(type(result), "model_fields", {})
    if "rule" in fields:
        return getattr(result, "rule") or None
    rejected = not (result.correct if hasattr(result, "correct") else result.valid)
    reason = result.reason or ""
    if rejected:
        if reason.startswith(("crash", "cuda_error")):
            return "crash"
        if reason.startswith("timeout"):
            return "timeout"
        name = reason.split(":", 1)[0]
        if name in _LEGACY:
            return _LEGACY[name]
        if "non-finite" in reason:
            return "nonfinite"
        if "has dtype" in reason or "not a tensor" in reason or "has shape" in reason or " is on " in reason:
            return "output_type"
        if "differ from the reference" in reason or "the candidate raised" in reason:
            return "mismatch"
        return "mismatch" if reason else None
    for check in result.checks:
        if not check.ok and check.name in _LEGACY:
            return _LEGACY[check.name]
    return None


def rejected(result) -> bool:
    return not (result.correct if hasattr(result, "correct") else result.valid)


def caught(result, case: Case) -> bool:
    """Caught for the reason it exists: the rule is one of the case's, and a hard rule rejects it."""
    rule = rule_of(result)
    if rule not in case.rules:
        return False
    return rule in FLAG_RULES or rejected(result)
