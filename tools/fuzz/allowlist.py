"""Documented deliberate differences between the MLX EP and ORT's CPU EP (docs/reliability.md,
"Deliberate differences"). explain(result) names the entry a fuzz outcome falls under, or ""
when none does: an unexplained outcome fails the suite. Keep each entry as narrow as the
difference it documents (outcome, test-name regex, mutator regex, error/detail regex)."""
import re

# (outcome, case regex, mutator regex or None, error/detail regex or None, reason)
ENTRIES = [
    # -- the EP runs what ORT's CPU EP has no kernel for (the ONNX schema allows it)
    ("ep_looser", r".", None, r"NOT_IMPLEMENTED : Could not find an implementation for",
     "ORT's CPU EP lacks a kernel for this op/type (e.g. Max/Min int16, Pow float^uint32); the EP implements the schema"),
    ("ep_looser", r"rnn|gru|lstm", None, r"Batchwise recurrent operations \(layout == 1\) are not supported",
     "layout=1 recurrent ops: ORT's CPU kernels refuse them, the EP implements them"),
    ("ep_looser", r"test_attention", None,
     r"inconsistent (q_sequence_length|total_sequence_length) \(between attn_mask",
     "Attention attn_mask: the ONNX spec lets it broadcast and be shorter than the kv length (padded with -inf); "
     "ORT's CPU kernel demands the exact lengths"),
    ("ep_looser", r"test_scan", r"empty_input", r"Invalid dim0_offset of 0\. Dimension 0 is 0",
     "Scan over a scan input of length 0: ORT's tensor slicer rejects it; the EP runs zero iterations (the final "
     "state is the initial one, scan outputs are empty), as the ONNX spec defines"),
    # -- the EP rejects what ORT's CPU EP reads in a way that is an artifact of its code
    ("ep_stricter", r".", r"attr_absurd|huge_dim|index_out_of_range", r"axis -?\d{6,} is out of range",
     "an axis >= 2^16: ORT truncates int64 attributes to int (2^40 -> 0) or skips axes checks on empty inputs; "
     "the EP rejects the out-of-range axis"),
    ("ep_stricter", r"test_reduce_\w*empty_set", r"huge_dim|index_out_of_range", r"axis -?\d+ is out of range",
     "Reduce* on an empty input: ORT does not validate the axes there; the EP always does"),
    ("ep_stricter", r"test_arg(max|min)", r"empty_input", r"cannot take the arg-extreme of an empty axis",
     "ArgMax/ArgMin over an empty axis have no index to return: ORT errors for some axes and returns a tensor "
     "of the wrong shape (the input's) for others; the EP always errors"),
    ("ep_stricter", r"test_layer_normalization", r"attr_absurd|attr_drop_or_add",
     r"Scale and \(optional\) bias must match X.shape\[axis:\]",
     "LayerNormalization whose Scale/B have non-1 dims before axis (the axis attribute changed): ORT broadcasts them "
     "over X; the EP supports Scale/B broadcastable to X.shape[axis:] only and errors"),
    ("ep_stricter", r"test_center_crop_pad", r"index_out_of_range|huge_dim", r"sizes must be non-negative",
     "CenterCropPad with a negative size (undefined in ONNX): ORT crops to 0, the EP errors"),
    ("ep_stricter", r".", r"huge_dim", r"dimension \d+ is not supported|padded axis \d+ is too large",
     "a dim >= 2^31 (e.g. ConstantOfShape [0, 2^40]): MLX shapes are int32, the EP errors where ORT returns an "
     "empty tensor"),
    ("ep_stricter", r"test_attention.*_expanded", r"empty_input", r"cannot be broadcast",
     "Concat of an empty input whose other dims differ (expanded Attention's past/present concat): ORT skips its "
     "checks but still counts its length along the axis (rows it never writes), the EP skips it; downstream "
     "shapes then disagree"),
    ("different", r"test_concat", r"empty_input", None,
     "Concat of an empty input whose other dims differ: ORT counts its length along the axis (rows it never "
     "writes), the EP skips it"),
    # -- both run, outputs differ where ORT's result is an artifact of its kernel
    ("different", r"test_(hardmax|argmax|argmin|maxpool|lrn|attention|clip|reduce_max|reduce_min|layer_norm|"
     r"dynamicquantizelinear|conv)", r"nan_inf", None,
     "NaN in the input of a max/min-like op: ORT's scans keep or skip a NaN depending on its position "
     "(a row starting with NaN gives Hardmax all zeros, a NaN elsewhere is ignored); MLX propagates NaN "
     "(the ONNX reference's numpy semantics)"),
    ("different", r"test_(reduce|arg(max|min))_\w+", None, r"output arr_0: (float32|int64)\[[0-9, ]*\] vs",
     "Reduce*/ArgMax/ArgMin of an empty input (axes at run time): ORT returns the input's (empty) shape, even "
     "with keepdims=0; the EP returns the reduced shape (filled with the reduction's identity), as ORT does for "
     "constant axes"),
    ("ep_looser", r"test_reduce_(max|min)_empty_set_bool", None, r"not defined for empty set with bool type",
     "ReduceMax/ReduceMin of an empty bool set: ONNX defines them (false/true), ORT's CPU kernel errors"),
    ("different", r"test_pow_types_int", r"huge_dim|index_out_of_range", None,
     "integer Pow that overflows (undefined in ONNX): ORT computes in double and converts, MLX multiplies in the type"),
    ("different", r"test_nonmaxsuppression", None, None,
     "NonMaxSuppression is not claimed by the EP: both outputs come from ORT's kernel, which reads an empty "
     "score_threshold as uninitialized memory (differs run to run)"),
    ("different", r"test_attention", r"declared_shape|attr_absurd", r"output arr_[1-3]: values differ",
     "Attention's qk_matmul_output: the EP writes masked scores as -inf (the ONNX reference), ORT as the type's "
     "lowest value"),
    ("different", r"test_(max|min)_int64", r"huge_dim", None,
     "Max/Min of int64 values >= 2^31: ORT's CPU kernel returns max(2^31, 1) = 1 (verified with onnxruntime "
     "1.31.1); the EP's result is the right one"),
    ("different", r"test_training_dropout", r"attr_drop_or_add", None,
     "training-mode Dropout without its seed attribute: random masks, different in every session"),
    ("different", r"test_cast", r"attr_absurd", None,
     "Cast with saturate other than 0/1 (the attribute only concerns float8 targets): ORT's CPU kernel returns "
     "zeros for a float target, the EP casts"),
]


def explain(r: dict) -> str:
    for outcome, case, mutator, text, reason in ENTRIES:
        if r["outcome"] != outcome or not re.search(case, r["case"]):
            continue
        if mutator and not re.search(mutator, r["mutator"]):
            continue
        if text and not re.search(text, r["detail"] + r["ep_error"] + r["cpu_error"], re.S):
            continue
        return reason
    return ""
