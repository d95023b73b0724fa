"""LLM clients for the tests and benchmarks: a greedy decode loop over plain ORT sessions (past
and present bound as an LLM runtime binds them) and onnxruntime-genai's generator, each on the
CPU EP or on MLX, plus the EP's report (ONNXRUNTIME_EP_MLX_REPORT) of an MLX session."""
import gc
import json
import os
import tempfile

import numpy as np
import onnxruntime as ort

import onnxruntime_ep_mlx as mlx_ep
from harness import EP, mlx_session


def ep_memory(sess):
    """The memory an application binds `sess`'s caches in: the MLX EP's device memory when the
    session has the EP and the EP lends some (onnxruntime_ep_mlx.device_memory_info(): MLX on a
    GPU, or ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=force), else None (host memory). Host buffers bound
    to a session with device memory are copied in and out by ORT on every run."""
    return mlx_ep.device_memory_info() if EP in sess.get_providers() else None


def bound_value(array, memory):
    """An OrtValue holding a copy of `array`, in `memory` (an OrtMemoryInfo; None: host memory)."""
    host = ort.OrtValue.ortvalue_from_numpy(np.array(array))
    if memory is None:
        return host
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), array.dtype, memory_info=memory)
    ort.copy_tensors([host], [value])
    return value


def host_array(value, dtype):
    """A numpy copy of an OrtValue's `dtype` contents, wherever it lives (device values through
    the EP's data transfer)."""
    if value.device_name().lower() == "cpu":
        return value.numpy().copy()  # (ORT has no data transfer from host to host)
    host = ort.OrtValue.ortvalue_from_shape_and_type(value.shape(), np.dtype(dtype))
    ort.copy_tensors([value], [host])
    return host.numpy().copy()


class ReportedSession:
    """An MLX session (mlx_session: no silent CPU fallback) whose EP report is read back by
    close(): the EP reads ONNXRUNTIME_EP_MLX_REPORT when the session is created and writes the
    report when it is released."""

    def __init__(self, path, so=None):
        self._dir = tempfile.TemporaryDirectory()
        self._path = os.path.join(self._dir.name, "report.json")
        os.environ["ONNXRUNTIME_EP_MLX_REPORT"] = self._path
        try:
            self.sess = mlx_session(path, so)
        finally:
            del os.environ["ONNXRUNTIME_EP_MLX_REPORT"]

    def close(self):
        del self.sess
        gc.collect()
        with open(self._path) as f:
            report = json.load(f)
        self._dir.cleanup()
        return report


def cpu_session(path, so=None):
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


class Decoder:
    """Greedy decoding through one ORT session of a decoder of build_llm_models (batch 1).

    shared=True binds each layer's past and present to one [1, kv_heads, max_len, head] buffer
    and feeds a static [1, max_len] attention mask (ones for the tokens so far), as
    onnxruntime-genai runs a past_present_share_buffer model with static mask handling: every
    decode step then has the same input shapes. shared=False feeds the growing mask and passes
    each step's present back as the next past (the concatenating layout). The shared buffers are
    allocated in ep_memory(sess), as an LLM runtime binds its caches: the EP's device memory where
    it lends some, else host memory."""

    def __init__(self, sess, cfg, dtype, shared, position_ids=False, growing_mask=False):
        self.sess, self.cfg, self.shared, self.position_ids = sess, cfg, shared, position_ids
        self.growing_mask = growing_mask  # shared: a [1, total] mask, as onnxruntime-genai feeds one
        self.kv_memory = ep_memory(sess)
        self.dtype = np.dtype(dtype)

    def _kv_names(self):
        for i in range(self.cfg.layers):
            for kv in ("key", "value"):
                yield f"past_key_values.{i}.{kv}", f"present.{i}.{kv}"

    def start(self):
        """Fresh (empty) cache."""
        c = self.cfg
        self.length = 0
        if self.shared:
            shape = (1, c.kv_heads, c.max_len, c.head_size)
            self.kv = {p: bound_value(np.zeros(shape, self.dtype), self.kv_memory) for p, _ in self._kv_names()}
        else:
            self.kv = {p: np.zeros((1, c.kv_heads, 0, c.head_size), self.dtype) for p, _ in self._kv_names()}

    def step(self, ids):
        """Runs tokens `ids` (1-D) after the cache; returns logits [1, len(ids), vocab]."""
        ids = np.asarray(ids, np.int64)[None]
        total = self.length + ids.shape[1]
        feeds = {"input_ids": ids}
        if self.position_ids:
            feeds["position_ids"] = np.arange(self.length, total, dtype=np.int64)[None]
        if self.shared:
            mask = np.zeros((1, total if self.growing_mask else self.cfg.max_len), np.int64)
            mask[:, :total] = 1
            feeds["attention_mask"] = mask
            binding = self.sess.io_binding()
            for name, value in feeds.items():
                binding.bind_cpu_input(name, value)
            binding.bind_output("logits")  # first: get_outputs() lists outputs as bound
            for past, present in self._kv_names():
                binding.bind_ortvalue_input(past, self.kv[past])
                binding.bind_ortvalue_output(present, self.kv[past])
            self.sess.run_with_iobinding(binding)
            # Only the logits: copy_outputs_to_cpu() would also copy every present buffer (48 MB
            # a step at Qwen2-0.5B's shape, a third of a CPU decode step, for either EP).
            logits = binding.get_outputs()[0].numpy()
        else:
            feeds["attention_mask"] = np.ones((1, total), np.int64)
            feeds.update(self.kv)
            outs = self.sess.run(None, feeds)
            names = [o.name for o in self.sess.get_outputs()]
            out = dict(zip(names, outs))
            logits = out["logits"]
            self.kv = {past: out[present] for past, present in self._kv_names()}
        self.length = total
        return logits

    def greedy(self, prompt, steps, forced=None):
        """Prefill `prompt`, then `steps` greedy tokens (or the tokens of `forced`, teacher
        forcing, so that logits stay comparable after a near-tie). Returns (prefill logits,
        generated tokens, last-position logits of every decode step)."""
        self.start()
        prefill = self.step(prompt)
        tokens, step_logits = [], []
        last = prefill[0, -1]
        for s in range(steps):
            token = int(np.argmax(last)) if forced is None else int(forced[s])
            tokens.append(int(np.argmax(last)))
            last = self.step([token])[0, -1]
            step_logits.append(last)
        return prefill, tokens, step_logits


def genai_generate(model_dir, prompt, new_tokens, on_mlx):
    """Greedy tokens of onnxruntime-genai's generator loop on `model_dir` (genai_config.json),
    on the CPU EP or on MLX (registered as a plugin EP library), plus the logits of each step.
    With on_mlx the EP's report of genai's session is returned too (else None)."""
    ((tokens, logits),), report = genai_generate_many(model_dir, [prompt], new_tokens, on_mlx)
    return tokens, logits, report


def genai_generate_many(model_dir, prompts, new_tokens, on_mlx, max_length=None):
    """genai_generate for each prompt in turn through one og.Model (one session), each with its
    own generator of `max_length` (default: the prompt's length + new_tokens). Returns a
    (tokens, logits) pair per prompt and the EP's report (None on the CPU EP)."""
    import onnxruntime_genai as og

    report_dir, report = None, None
    config = og.Config(model_dir)
    config.clear_providers()
    if on_mlx:
        register_with_genai()
        config.append_provider(EP)
        report_dir = tempfile.TemporaryDirectory()
        os.environ["ONNXRUNTIME_EP_MLX_REPORT"] = os.path.join(report_dir.name, "report.json")
    try:
        model = og.Model(config)
    finally:
        os.environ.pop("ONNXRUNTIME_EP_MLX_REPORT", None)
    results = []
    for prompt in prompts:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max_length or len(prompt) + new_tokens, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(np.asarray([prompt], np.int32))
        tokens, logits = [], []
        while not generator.is_done() and len(tokens) < new_tokens:
            # the logits the next token is chosen from (get_logits runs a pending step itself)
            logits.append(np.array(generator.get_logits())[0, -1])
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        results.append((tokens, logits))
        del generator, params
    del model
    gc.collect()
    if report_dir is not None:
        with open(os.path.join(report_dir.name, "report.json")) as f:
            report = json.load(f)
        report_dir.cleanup()
    return results, report


_genai_registered = False


def register_with_genai():
    """Registers the EP library with onnxruntime-genai (once per process), as an application
    would: og.register_execution_provider_library(name, path of libonnxruntime_ep_mlx)."""
    global _genai_registered
    if not _genai_registered:
        import onnxruntime_genai as og

        og.register_execution_provider_library(EP, mlx_ep.library_path())
        _genai_registered = True


def all_on_mlx_in_one_partition(report):
    """(ok, why): every node of the graph claimed by MLX, in one partition."""
    g = report["graphs"][0]
    if g["nodes_claimed"] != g["nodes_total"] or len(g["partitions"]) != 1:
        declined = sorted({f"{d['domain'] + '.' if d['domain'] else ''}{d['op_type']}" for d in g["declined"]})
        return False, (f"{g['nodes_claimed']}/{g['nodes_total']} nodes on MLX in {len(g['partitions'])} "
                       f"partition(s); declined: {', '.join(declined)}")
    return True, ""


def total_traces(report):
    return sum(p["traces"] for p in report["runtime"]["partitions"])
