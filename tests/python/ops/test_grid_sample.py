"""Parity tests of GridSample (16, 20, 22) and AffineGrid (20) (src/ops/grid_sample.cc) against
ORT's CPU kernels: every GridSample mode and padding with and without align_corners, 2-D and 3-D,
grids reaching well past [-1, 1] (reflection folding several times, zeros reading nothing), cubic
3-D (which ORT errors on); AffineGrid in 2-D and 3-D with `size` a constant or a graph input."""
import numpy as np
import pytest

from harness import assert_mlx_error, check_parity, node_model

MODES_20 = ["linear", "nearest", "cubic"]
PADDINGS = ["zeros", "border", "reflection"]


def grid_model(x, grid, attrs, opset=20):
    return node_model("GridSample", [("x", x), ("grid", grid)], attrs, opset)


def random_grid(rng, shape, reach=1.6):
    """Locations in [-reach, reach]: past the image on every side; a few exactly on pixel centres and
    halves (nearest's ties, linear's integral floors)."""
    grid = rng.uniform(-reach, reach, shape).astype(np.float32)
    flat = grid.reshape(-1)
    flat[: flat.size // 8] = np.round(flat[: flat.size // 8] * 4) / 4
    return grid


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES_20)
def test_2d(mode, padding, align_corners):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = random_grid(rng, (2, 4, 6, 2))
    check_parity(*grid_model(x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners}),
                 rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_3d(mode, padding, align_corners):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 2, 3, 4, 5)).astype(np.float32)
    grid = random_grid(rng, (2, 3, 2, 4, 3))
    check_parity(*grid_model(x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners}),
                 rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_opset16_mode_names(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)
    grid = random_grid(rng, (1, 5, 3, 2), reach=1.2)
    check_parity(*grid_model(x, grid, {"mode": mode, "padding_mode": "border"}, opset=16), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding", PADDINGS)
def test_far_locations_and_one_pixel_axes(padding):
    """Reflection folds a location several widths away; an axis of one pixel (align_corners off:
    its borders -0.5 and 0.5)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 1, 6)).astype(np.float32)
    grid = rng.uniform(-9, 9, (1, 3, 5, 2)).astype(np.float32)
    check_parity(*grid_model(x, grid, {"mode": "linear", "padding_mode": padding}, opset=22), rtol=1e-5, atol=1e-6)


def test_spatial_transformer_identity_grid():
    """The spatial-transformer use: an identity affine grid (align_corners) samples the image back."""
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 5), indexing="ij")
    grid = np.broadcast_to(np.stack([xs, ys], -1), (2, 4, 5, 2)).astype(np.float32)
    got = check_parity(*grid_model(x, grid, {"mode": "linear", "align_corners": 1}), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[0], x, rtol=1e-5, atol=1e-5)


def test_cubic_3d_errors_as_on_cpu():
    """ORT's CPU kernel errors on cubic 3-D at run time; the EP declines it (no made-up output)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, 2, 3, 3)).astype(np.float32)
    assert_mlx_error(*grid_model(x, random_grid(rng, (1, 2, 2, 2, 3)), {"mode": "cubic"}))


def affine_model(theta, size, align_corners, as_input=False):
    return node_model("AffineGrid", [("theta", theta)], {"align_corners": align_corners}, 20,
                      host=[("size", np.asarray(size, np.int64))], host_as_input=as_input)


@pytest.mark.parametrize("as_input", [False, True], ids=["constant_size", "size_input"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 1, 1, 4), (2, 2, 3, 4, 5), (2, 1, 1, 2, 1)], ids=str)
def test_affine_grid(size, align_corners, as_input):
    """AffineGrid-20 against ORT: 2-D and 3-D, axes of one pixel, `size` a constant or a graph input
    (a host value the partition specializes on)."""
    rng = np.random.default_rng(9)
    dims = len(size) - 2
    theta = rng.standard_normal((size[0], dims, dims + 1)).astype(np.float32)
    check_parity(*affine_model(theta, size, align_corners, as_input), rtol=1e-5, atol=1e-6)


def test_spatial_transformer_affine_grid_then_grid_sample():
    """A spatial transformer's sampler, AffineGrid then GridSample, as one MLX partition."""
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 8, 6)).astype(np.float32)
    theta = (np.array([[0.9, 0.1, 0.05], [-0.1, 1.1, -0.02]], np.float32)
             + 0.05 * rng.standard_normal((2, 2, 3)).astype(np.float32))
    graph = helper.make_graph(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
         helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="border")],
        "stn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                helper.make_tensor_value_info("theta", TensorProto.FLOAT, theta.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3, 5, 4))],
        [helper.make_tensor("size", TensorProto.INT64, [4], [2, 3, 5, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    check_parity(model, {"x": x, "theta": theta}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES_20)
def test_non_finite_locations(mode, padding, align_corners):
    """inf, -inf and NaN in the grid: ORT 1.31 reads them as -1 (the fuzz suite found the EP's NaN
    there, and an index that a NaN cast made read out of bounds: a crash)."""
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    grid = np.array([[[[np.inf, 0.1], [-np.inf, 0.2], [0.3, np.inf], [np.nan, 0.0]],
                      [[np.nan, np.nan], [0.5, -np.inf], [-0.7, 0.4], [np.inf, -np.inf]]]], np.float32)
    check_parity(*grid_model(x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners}),
                 rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding", PADDINGS)
def test_huge_locations_stay_in_bounds(padding):
    """Locations of 1e30 (ORT casts their floor to int64: undefined) read inside the image; 3e38
    overflows to inf when denormalized (the weights then give NaN, as IEEE arithmetic does): the
    run must not read out of bounds either way."""
    from harness import run_mlx
    x = np.ones((1, 1, 3, 4), np.float32)
    grid = np.array([[[[1e30, -1e30], [-3e38, 3e38]]]], np.float32)
    got, mlx, total = run_mlx(*grid_model(x, grid, {"mode": "cubic", "padding_mode": padding}))
    assert mlx == total == 1 and got[0].shape == (1, 1, 1, 2) and np.isfinite(got[0][0, 0, 0, 0])


def test_empty_spatial_dims_error_as_ort():
    """An empty spatial axis of X (GridSample) or in `size` (AffineGrid): ORT errors, so does the EP
    (GridSample's taps would otherwise read past an empty axis)."""
    rng = np.random.default_rng(4)
    assert_mlx_error(*grid_model(np.zeros((1, 2, 0, 3), np.float32), random_grid(rng, (1, 2, 2, 2)),
                                 {"mode": "linear"}))
    theta = rng.standard_normal((1, 2, 3)).astype(np.float32)
    assert_mlx_error(*affine_model(theta, (1, 1, 3, 0), 0, as_input=True))
