"""Parity tests of the resize family: Resize (10, 11-12, 13-17, 18, 19+) and Upsample (7-8, 9)
(src/ops/resize.cc, src/ops/resize_sampling.cc) against ORT's CPU kernel."""
import numpy as np
import pytest

from harness import (NO_KERNEL, BF16, assert_declined, assert_mlx_error, check_parity, ids, node_model,
                     random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16

COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn", "tf_crop_and_resize"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
EMPTY_ROI = np.array([], np.float32)


def resize_model(x, attrs, opset=19, scales=None, sizes=None, roi=None, as_input=False, infer=True):
    """(model, feeds) of one Resize node; scales/sizes/roi are constants (or graph inputs). `infer`:
    output type from shape inference (else declared, for nodes shape inference rejects)."""
    if opset == 10:
        host = [("scales", np.asarray(scales, np.float32))]
    else:
        host = [("roi", EMPTY_ROI if roi is None else np.asarray(roi, np.float32)),
                ("scales", None if scales is None else np.asarray(scales, np.float32))]
        if sizes is not None:
            host.append(("sizes", np.asarray(sizes, np.int64)))
    return node_model("Resize", [("x", x)], attrs, opset, host=host, host_as_input=as_input,
                      out_dtype=None if infer else x.dtype)


def crop_roi(rank, lo=0.1, hi=0.8):
    return np.array([lo] * rank + [hi] * rank, np.float32)


def coord_opset(coord):
    """tf_half_pixel_for_nn was removed from the spec in 13, half_pixel_symmetric added in 19."""
    return 11 if coord == "tf_half_pixel_for_nn" else 19


# ---------------------------------------------------------------------------------------------
# The YOLO neck: 2x nearest upsampling

@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
@pytest.mark.parametrize("attrs,opset", [
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 11),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 13),
    ({"mode": "nearest"}, 13),  # half_pixel + round_prefer_floor
    ({"mode": "nearest"}, 19),
    ({"mode": "nearest"}, 10),
], ids=lambda v: ids(v) if isinstance(v, dict) else str(v))
def test_yolo_nearest_2x(attrs, opset, dtype):
    x = random_array((1, 5, 13, 11), dtype)
    got = check_parity(*resize_model(x, attrs, opset, scales=[1, 1, 2, 2]))
    np.testing.assert_array_equal(got[0], x.repeat(2, axis=2).repeat(2, axis=3))


def test_integer_nearest_upsampling_copies_without_a_gather():
    """2x nearest upsampling repeats each value (resize.cc: mx::repeat, a broadcast copy) where a
    gather per axis took 1.73 ms against 0.36 for a (1, 96, 24, 40) map on this machine; other
    scales keep the gathers (test_nearest)."""
    from harness import census_of_tests, mlx_device
    if mlx_device() != "cpu":
        pytest.skip("the census is MLX's CPU device's here (a GPU runs the same ops)")
    cases = ["test_yolo_nearest_2x[mode=nearest_coordinate_transformation_mode=asymmetric_nearest_mode=floor-13-float32]",
             "test_yolo_nearest_2x[mode=nearest-19-float32]"]
    census, _ = census_of_tests(__file__, cases)
    assert len(census) == 2 and not any("Gather" in line for line in census), census


def test_upsample_2x_sizes_from_runtime_inputs():
    x = random_array((2, 3, 7, 5), np.float32)
    check_parity(*resize_model(x, {"mode": "nearest"}, 13, sizes=[2, 3, 14, 10], as_input=True))
    check_parity(*resize_model(x, {"mode": "nearest"}, 13, scales=[1, 1, 2, 2], as_input=True))


# ---------------------------------------------------------------------------------------------
# nearest: every coordinate transformation and rounding

@pytest.mark.parametrize("shape,scales", [((1, 2, 5, 7), [1, 1, 2.5, 1.6]), ((3, 9, 11), [1, 0.6, 0.35]),
                                          ((17,), [0.7])], ids=ids)
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coord", COORDS)
def test_nearest(coord, nearest_mode, shape, scales):
    x = random_array(shape, np.float32)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest_mode}
    roi = None
    if coord == "tf_crop_and_resize":
        roi, attrs["extrapolation_value"] = crop_roi(len(shape), -0.2, 0.9), -5.0
    check_parity(*resize_model(x, attrs, coord_opset(coord), scales=scales, roi=roi))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil"])
@pytest.mark.parametrize("width,scale,coord", [(32, 2.1, "half_pixel"), (7, 0.6, "half_pixel_symmetric"),
                                               (20, 0.3, "half_pixel"), (26, 64 / 26, "half_pixel")])
def test_nearest_ties(width, scale, coord, nearest_mode):
    """Coordinates within float rounding of a half: ORT treats |frac - 0.5| <= 1e-6 as a tie."""
    x = np.tile(np.arange(width, dtype=np.float32), (2, 1))
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest_mode}
    check_parity(*resize_model(x, attrs, 19, scales=[1, scale]))


# ---------------------------------------------------------------------------------------------
# linear and cubic

LINEAR_SHAPES = [((7, 9), [1.7, 0.5]), ((3, 8, 9), [0.3, 1.3, 0.7]), ((1, 2, 5, 7), [1, 1, 2, 1.5]),
                 ((2, 3, 9, 11), [1, 1, 0.6, 0.35]), ((1, 9, 7, 2), [1, 0.5, 0.6, 1]),
                 ((1, 1, 3, 8, 9), [1, 1, 2, 0.5, 0.4])]


@pytest.mark.parametrize("shape,scales", LINEAR_SHAPES, ids=ids)
@pytest.mark.parametrize("coord", [c for c in COORDS if c != "tf_half_pixel_for_nn"])
def test_linear(coord, shape, scales):
    x = random_array(shape, np.float32, low=-4, high=4)
    attrs = {"mode": "linear", "coordinate_transformation_mode": coord}
    roi = None
    if coord == "tf_crop_and_resize":
        roi, attrs["extrapolation_value"] = crop_roi(len(shape), -0.1, 1.2), 3.5
    check_parity(*resize_model(x, attrs, 19, scales=scales, roi=roi))


def test_linear_half_pixel_2d_bilinear():
    """The plain bilinear case of image models: NCHW half_pixel, non-integer up- and downscales."""
    x = random_array((2, 3, 31, 17), np.float32)
    for scales in ([1, 1, 1.75, 2.25], [1, 1, 0.45, 0.8], [1, 1, 2, 2]):
        check_parity(*resize_model(x, {"mode": "linear"}, 13, scales=scales))


CUBIC_SHAPES = [((7, 9), [1.7, 0.5]), ((1, 2, 5, 7), [1, 1, 2, 1.5]), ((2, 1, 12, 9), [1, 1, 0.4, 0.7]),
                ((1, 4, 5, 3), [1, 2, 1.5, 1])]  # the last one is NHWC (ORT runs its filter path)


@pytest.mark.parametrize("shape,scales", CUBIC_SHAPES, ids=ids)
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("coord,cubic_a", [("half_pixel", -0.75), ("align_corners", -0.5),
                                           ("asymmetric", -0.75), ("pytorch_half_pixel", -0.6),
                                           ("half_pixel_symmetric", -0.75), ("tf_crop_and_resize", -0.75)])
def test_cubic(coord, cubic_a, exclude_outside, shape, scales):
    x = random_array(shape, np.float32, low=-4, high=4)
    attrs = {"mode": "cubic", "coordinate_transformation_mode": coord, "cubic_coeff_a": cubic_a,
             "exclude_outside": exclude_outside}
    roi = None
    if coord == "tf_crop_and_resize":
        roi, attrs["extrapolation_value"] = crop_roi(len(shape), -0.1, 1.2), 3.5
        if shape[-1] == 3:  # NHWC: declined, see test_declined
            return
    check_parity(*resize_model(x, attrs, 19, scales=scales, roi=roi))


@pytest.mark.parametrize("shape,scales", LINEAR_SHAPES + [((1, 1, 16, 16), [1, 1, 0.25, 0.3]),
                                                          ((1, 1, 40, 3), [1, 1, 0.05, 1])], ids=ids)
@pytest.mark.parametrize("mode,exclude_outside", [("linear", 0), ("linear", 1), ("cubic", 0), ("cubic", 1)])
def test_antialias(mode, exclude_outside, shape, scales):
    if mode == "cubic" and len(shape) not in (2, 4):
        pytest.skip("ORT's cubic takes 2-D and 4-D inputs only")
    x = random_array(shape, np.float32, low=-4, high=4)
    attrs = {"mode": mode, "antialias": 1, "exclude_outside": exclude_outside}
    check_parity(*resize_model(x, attrs, 18, scales=scales))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_tf_crop_and_resize_nchw(mode):
    x = random_array((1, 2, 9, 11), np.float32)
    attrs = {"mode": mode, "antialias": 1, "coordinate_transformation_mode": "tf_crop_and_resize",
             "extrapolation_value": -1.0}
    check_parity(*resize_model(x, attrs, 19, scales=[1, 1, 0.6, 0.5], roi=[0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3]))


# ---------------------------------------------------------------------------------------------
# Output size: sizes, keep_aspect_ratio_policy, axes, roi per axis

@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_sizes_and_policy(mode, policy):
    x = random_array((1, 3, 10, 7), np.float32)
    attrs = {"mode": mode, "keep_aspect_ratio_policy": policy}
    check_parity(*resize_model(x, dict(attrs, axes=[2, 3]), 18, sizes=[6, 11]))
    if mode == "nearest":  # without axes the policy scales every dim, which ORT's linear rejects
        check_parity(*resize_model(x, attrs, 18, sizes=[2, 3, 6, 11]))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_axes(mode):
    x = random_array((2, 3, 10, 7), np.float32)
    check_parity(*resize_model(x, {"mode": mode, "axes": [2, 3]}, 18, scales=[1.5, 0.6]))
    check_parity(*resize_model(x, {"mode": mode, "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}, 19,
                               sizes=[5, 12]))
    attrs = {"mode": mode, "axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize"}
    check_parity(*resize_model(x, attrs, 19, sizes=[8, 9], roi=[0.2, -0.1, 0.9, 1.1]))


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_sizes_given_with_empty_scales(opset):
    x = random_array((1, 2, 6, 5), np.float32)
    check_parity(*resize_model(x, {"mode": "linear"}, opset, scales=np.zeros(0), sizes=[1, 2, 9, 3]))


@pytest.mark.parametrize("scales,sizes", [([1, 1, 1, 1], None), (None, [1, 2, 6, 5]), ([1, 1, 1.1, 1.05], None)])
def test_unchanged_size_is_identity(scales, sizes):
    x = random_array((1, 2, 6, 5), np.float32)
    got = check_parity(*resize_model(x, {"mode": "cubic"}, 13, scales=scales, sizes=sizes))
    np.testing.assert_array_equal(got[0], x)


@pytest.mark.parametrize("shape,scales", [((0, 3, 4, 4), [1, 1, 2, 2]), ((1, 3, 4, 4), [1, 1, 0.2, 2])], ids=ids)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_empty(mode, shape, scales):
    check_parity(*resize_model(random_array(shape, np.float32), {"mode": mode}, 13, scales=scales))


# ---------------------------------------------------------------------------------------------
# Types

@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32], ids=ids)
@pytest.mark.parametrize("coord", ["asymmetric", "half_pixel", "tf_crop_and_resize"])
def test_nearest_integer_types(coord, dtype):
    x = random_array((1, 2, 5, 6), dtype, low=0, high=100)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "extrapolation_value": 7.0}
    roi = crop_roi(4, -0.3, 1.1) if coord == "tf_crop_and_resize" else None
    check_parity(*resize_model(x, attrs, 19, scales=[1, 1, 1.7, 0.6], roi=roi))


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.uint16, BF16], ids=ids)
def test_nearest_types_without_ort_kernel(dtype):
    """ORT's CPU kernel has no such type; nearest only moves data, so int32/float32 data give the answer."""
    base = random_array((1, 2, 5, 6), np.int32, low=0, high=1 if dtype == np.bool_ else 100)
    ref = run_cpu(*resize_model(base, {"mode": "nearest"}, 13, scales=[1, 1, 1.7, 0.6]))[0]
    if dtype == BF16:
        check_bf16(*resize_model(base.astype(BF16), {"mode": "nearest"}, 13, scales=[1, 1, 1.7, 0.6]),
                   [ref.astype(np.float32)])
        return
    got, mlx, total = run_mlx(*resize_model(base.astype(dtype), {"mode": "nearest"}, 13, scales=[1, 1, 1.7, 0.6]))
    assert mlx == total == 1
    np.testing.assert_array_equal(got[0], ref.astype(dtype))


@pytest.mark.parametrize("attrs,scales", [
    ({"mode": "linear"}, [1, 1, 1.7, 0.6]),
    ({"mode": "cubic", "exclude_outside": 1}, [1, 1, 1.7, 0.6]),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.4, 0.6]),
    ({"mode": "cubic", "antialias": 1}, [1, 1, 0.4, 0.6]),
    ({"mode": "cubic"}, [1, 1.7, 1.4, 1]),  # NHWC: rounded to float16 after each axis, as ORT does
], ids=ids)
def test_float16(attrs, scales):
    x = random_array((1, 3, 9, 8), np.float16)
    check_parity(*resize_model(x, attrs, 19, scales=scales))


@pytest.mark.parametrize("attrs,scales", [
    ({"mode": "linear"}, [1, 1, 1.7, 0.6]),
    ({"mode": "cubic"}, [1, 1, 1.7, 0.6]),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.4, 0.6]),
], ids=ids)
def test_bfloat16(attrs, scales):
    """ORT has no bfloat16 Resize: the float32 result rounded to bfloat16 is the reference."""
    x = random_array((1, 3, 9, 8), np.float32).astype(BF16).astype(np.float32)
    ref = run_cpu(*resize_model(x, attrs, 19, scales=scales))
    check_bf16(*resize_model(x.astype(BF16), attrs, 19, scales=scales), ref)


# ---------------------------------------------------------------------------------------------
# Older opsets and Upsample

@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.6, 0.3], [1, 1, 1.5, 2.5]], ids=ids)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10(mode, scales):
    x = random_array((1, 2, 5, 7), np.float32)
    check_parity(*resize_model(x, {"mode": mode}, 10, scales=scales))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8], ids=ids)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("opset", [7, 9])
def test_upsample(opset, mode, dtype):
    if mode == "linear" and dtype != np.float32:
        pytest.skip("integer linear is declined (test_declined)")
    x = random_array((1, 2, 3, 5), dtype, low=0, high=50)
    scales = [1.0, 1.0, 2.0, 1.5]
    if opset == 7:
        model, feeds = node_model("Upsample", [("x", x)], {"mode": mode, "scales": scales}, 7)
    else:
        model, feeds = node_model("Upsample", [("x", x)], {"mode": mode}, 9,
                                  host=[("scales", np.array(scales, np.float32))])
    check_parity(model, feeds)


# ---------------------------------------------------------------------------------------------
# Declined and failing nodes

@pytest.mark.parametrize("x,attrs,scales,roi", [
    # ORT's 8-bit linear uses fixed-point weights
    (random_array((1, 2, 5, 6), np.uint8, low=0, high=200), {"mode": "linear"}, [1, 1, 1.5, 0.6], None),
    (random_array((1, 2, 5, 6), np.int32, low=-50, high=50), {"mode": "linear"}, [1, 1, 1.5, 0.6], None),
    # ORT writes NHWC extrapolation values as if the data were NCHW
    (random_array((1, 5, 7, 2), np.float32), {"mode": "linear", "antialias": 1,
                                              "coordinate_transformation_mode": "tf_crop_and_resize"},
     [1, 1.5, 2.5, 1], [0, -0.3, 0.1, 0, 1, 0.8, 1.4, 1]),
    (random_array((1, 5, 7, 2), np.float32), {"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize"},
     [1, 1.5, 2.5, 1], [0, -0.3, 0.1, 0, 1, 0.8, 1.4, 1]),
], ids=["uint8-linear", "int32-linear", "nhwc-antialias-crop", "nhwc-cubic-crop"])
def test_declined(x, attrs, scales, roi):
    assert_declined(*resize_model(x, attrs, 19, scales=scales, roi=roi))


def test_float64_linear_is_declined():
    """ORT has no float64 Resize (it would compute in float32): declined rather than guessed, so
    the session cannot place the node at all."""
    x = random_array((1, 1, 4, 4), np.float64)
    with pytest.raises(Exception, match=NO_KERNEL):
        run_mlx(*resize_model(x, {"mode": "linear"}, 13, scales=[1, 1, 2, 2]))


@pytest.mark.parametrize("shape,attrs,scales", [
    ((9,), {"mode": "linear"}, [2.0]),                    # ORT's linear needs rank >= 2
    ((2, 3, 4, 5), {"mode": "linear"}, [1, 2, 2, 2]),     # neither NCHW nor NHWC
    ((2, 3, 4), {"mode": "cubic"}, [1, 2, 2]),             # ORT's cubic needs rank 2 or 4
    ((1, 2, 4, 5), {"mode": "cubic"}, [1, 0.5, 0.5, 1]),  # NHWC cubic needs upscaling
], ids=["linear-1d", "linear-4d", "cubic-3d", "cubic-nhwc-down"])
def test_unsupported_shapes_error(shape, attrs, scales):
    """ORT rejects these scales; fed at run time, the MLX translation must fail too."""
    assert_mlx_error(*resize_model(random_array(shape, np.float32), attrs, 13, scales=scales, as_input=True))


def test_bad_sizes_error():
    x = random_array((1, 2, 4, 5), np.float32)
    assert_mlx_error(*resize_model(x, {"mode": "nearest"}, 13, sizes=[1, 2, 4], as_input=True, infer=False))
