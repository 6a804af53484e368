"""jdata.ops.image's decoders: TF parity on TF-written fixtures, the pixel limit, damaged
files as DataError, and a fuzz test. Fixtures: tests/ops/fixtures/make_image_decode_fixtures.py."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

import jdata
from jdata._errors import DecodeError
from jdata.ops import _image_decode, image
from tests.ops.fixtures.make_image_decode_fixtures import CALLS

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
with open(os.path.join(FIXTURES, "image_decode.json")) as _f:
    CASES = json.load(_f)["cases"]
ARRAYS = dict(np.load(os.path.join(FIXTURES, "image_decode.npz")))
# TF's decode_jpeg and decode_png refuse BMP files and animated GIFs by name ("a wrong
# op"); ours decode them as decode_image does.
_TF_WRONG_OP = ("wrong op", "animated gifs")
_JPEG_TOLERANCE = 1  # libjpeg-turbo builds may round the fast DCT apart; measured 0


def file(case: str) -> bytes:
    return ARRAYS[f"{case}/file"].tobytes()


def ours(call: str):
    function, kwargs = CALLS[call]
    if function == "decode_jpeg":
        return image.decode_jpeg()
    return getattr(image, function)(np.dtype(kwargs.get("dtype", "uint8")))


def _calls(decoded: bool) -> list[tuple[str, str]]:
    return [(case, call) for case, meta in CASES.items()
            for call, info in meta["calls"].items() if ("error" not in info) == decoded]


@pytest.mark.parametrize("case,call", _calls(decoded=True))
def test_decodes_as_tensorflow(case, call):
    want = ARRAYS[f"{case}/{call}"]
    got = ours(call)(file(case))
    assert got.shape == want.shape and got.dtype == want.dtype
    difference = np.abs(got.astype(np.int64) - want).max()
    if CASES[case]["format"] == "jpeg":  # uint16 outputs are 8-bit values times 256
        assert difference <= _JPEG_TOLERANCE * (256 if got.dtype == np.uint16 else 1)
    else:
        assert difference == 0


@pytest.mark.parametrize("case,call", _calls(decoded=False))
def test_refuses_what_tensorflow_refuses_as_damaged(case, call):
    error = CASES[case]["calls"][call]["error"]
    if any(reason in error for reason in _TF_WRONG_OP) and "truncated" not in case:
        got = ours(call)(file(case))  # what tf's decode_image returns
        assert (got == ARRAYS[f"{case}/decode_image_{got.dtype.name}"]).all()
        return
    with pytest.raises(image.ImageDecodeError, match=f"^{CALLS[call][0]}: invalid "):
        ours(call)(file(case))


def test_a_16_bit_png_through_decode_jpeg_is_scaled_as_tensorflow():
    got = image.decode_jpeg()(file("png_gray16"))
    want = ARRAYS["png_gray16/decode_jpeg"]
    assert got.mean() == pytest.approx(want.mean()) and want.mean() < 200  # not saturated
    sixteen = image.decode_png(np.uint16)(file("png_gray16"))
    assert (got == sixteen >> 8).all()


def test_a_damaged_scan_in_a_complete_jpeg_decodes_as_tensorflow():
    got = image.decode_jpeg()(file("jpeg_damaged_scan"))
    assert (got == ARRAYS["jpeg_damaged_scan/decode_jpeg"]).all()
    assert (got != ARRAYS["jpeg_420/decode_jpeg"]).any()  # the damage shows


@pytest.mark.parametrize("cut", [0.25, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("case", ["jpeg_420", "jpeg_progressive", "jpeg_cmyk", "png_rgb16",
                                  "gif", "bmp_rgb"])
def test_a_truncated_file_is_refused(case, cut):
    data = file(case)
    with pytest.raises(image.ImageDecodeError, match="^decode_image: invalid "):
        image.decode_image()(data[:int(len(data) * cut)])


def oversized(case: str, height: int = 20000, width: int = 20000) -> bytes:
    """The case's file with a header that declares ``width x height``."""
    data = bytearray(file(case))
    kind = CASES[case]["format"]
    if kind == "jpeg":
        sof = data.index(b"\xff\xc0")
        data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    elif kind == "png":
        data[16:24] = struct.pack(">II", width, height)
    elif kind == "gif":
        data[6:10] = struct.pack("<HH", width, height)
    else:
        data[18:26] = struct.pack("<ii", width, height)
    return bytes(data)


@pytest.mark.parametrize("case", ["jpeg_420", "jpeg_cmyk", "png_rgb16", "gif", "bmp_rgb"])
@pytest.mark.parametrize("decoder", [image.decode_image, image.decode_png, image.decode_jpeg])
def test_an_oversized_header_is_refused_with_the_sizes_and_the_remedy(case, decoder):
    name = decoder.__name__
    with pytest.raises(image.ImageTooLargeError) as raised:
        decoder()(oversized(case))
    assert str(raised.value) == (
        f"{name}: the header declares a 20000x20000 image (400,000,000 pixels), more than "
        "max_pixels=178,956,970; refused before decoding. If such images are expected, "
        f"raise the limit: {name}(max_pixels=400000000)")
    assert isinstance(raised.value, DecodeError) and image.MAX_PIXELS == 2**29 // 3


_PEAK_RSS = """
import resource, sys
from jdata.ops import image
data = open(sys.argv[1], "rb").read()
decode = image.decode_image()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decode(data)
except image.ImageDecodeError as e:
    print(type(e).__name__, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("case,refusal", [
    ("jpeg_gray", "ImageTooLargeError"), ("png_rgb8", "ImageTooLargeError"),
    ("jpeg_420_truncated", "ImageDecodeError")])  # its header is cut short too
def test_an_oversized_header_is_refused_without_allocating(case, refusal, tmp_path):
    path = tmp_path / "bomb"
    path.write_bytes(oversized(case))  # 783, 1912 and 621 bytes
    result = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(path)], capture_output=True,
                            text=True, check=True, cwd=os.path.dirname(jdata.__path__[0]))
    name, growth = result.stdout.split()
    assert name == refusal
    assert int(growth) < 100_000  # KiB of peak RSS: a decode would allocate 1.2 GB


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_a_gif_frame_beyond_its_screen_is_held_to_the_limit():
    data = bytearray(file("gif"))
    frame = data.index(b"\x2c\x00\x00\x00\x00")  # the first image descriptor, at (0, 0)
    data[frame + 5:frame + 9] = struct.pack("<HH", 12000, 12000)
    assert _image_decode.header_size(bytes(data), "gif") == (24, 32)  # the screen's
    with pytest.raises(image.ImageTooLargeError, match="a 12000x12000 image"):
        image.decode_image(max_pixels=10_000)(bytes(data))  # PIL's size is checked too


@pytest.mark.parametrize("case", ["jpeg_420", "png_gray16", "gif", "bmp_rgb"])
def test_max_pixels_allows_exactly_that_many(case):
    pixels = 24 * 32
    assert image.decode_image(max_pixels=pixels)(file(case)).shape == (24, 32, 3)
    with pytest.raises(image.ImageTooLargeError, match="decode_image: the header declares a "
                       "32x24 image .768 pixels., more than max_pixels=767"):
        image.decode_image(max_pixels=pixels - 1)(file(case))


@pytest.mark.parametrize("antialias", [False, True])
def test_the_decode_resize_fusion_keeps_the_limit_and_the_errors(antialias):
    def pipeline(data, max_pixels=image.MAX_PIXELS):
        return (jdata.from_source([data]).map(image.decode_jpeg(max_pixels=max_pixels))
                .map(image.resize(size=(8, 8), antialias=antialias)))

    assert "decode_resize_fusion" in pipeline(file("jpeg_420")).explain()
    with pytest.raises(jdata.DataError) as raised:
        next(iter(pipeline(file("jpeg_420"), max_pixels=767)))
    assert isinstance(raised.value.__cause__, image.ImageTooLargeError)
    for damaged in ("jpeg_420_truncated", "png_rgb8_truncated"):
        with pytest.raises(jdata.DataError) as raised:
            next(iter(pipeline(file(damaged))))
        assert isinstance(raised.value.__cause__, image.ImageDecodeError)
    sixteen = next(iter(pipeline(file("png_gray16"))))  # the unfused decode's pixels
    unfused = pipeline(file("png_gray16")).with_options(jdata.Options(optimize=False))
    assert (sixteen == next(iter(unfused))).all()


@pytest.mark.parametrize("parallel,engine", [(None, "auto"), (2, "threads"), (2, "processes")])
def test_a_damaged_element_is_a_data_error_naming_it_and_ignore_errors_skips_it(parallel,
                                                                               engine):
    elements = [file("jpeg_420"), file("jpeg_420_truncated"), file("png_rgb8")]
    ds = (jdata.from_source(elements).map(image.decode_image(), num_parallel_calls=parallel)
          .with_options(jdata.Options(engine=engine)))
    it = iter(ds)
    next(it)
    with pytest.raises(jdata.DataError) as raised:
        next(it)
    error = raised.value
    assert (error.op, error.position, error.path, error.record) == ("map", 1, None, None)
    assert str(error).startswith("map: cannot decode the element at position 1 of its input: "
                                 "decode_image: invalid JPEG data (621 bytes)")
    assert isinstance(error.__cause__, image.ImageDecodeError)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
    it = ds.ignore_errors().iterator()
    assert [x.shape for x in it] == [(24, 32, 3)] * 2
    assert it.stats().dropped[0]["unreadable_records"] == 1


def test_a_wrong_element_type_is_the_code_s_error_not_the_data_s():
    ds = jdata.from_source([np.zeros(3, np.uint8)]).map(image.decode_image())
    with pytest.raises(jdata.UDFError) as raised:
        next(iter(ds))
    assert not isinstance(raised.value, jdata.DataError)
    assert isinstance(raised.value.__cause__, TypeError)


@pytest.mark.parametrize("data,match", [(b"", "empty"), (b"GIF8", "invalid GIF"),
                                        (b"not an image at all", "invalid image")])
def test_empty_and_unknown_data_are_refused(data, match):
    with pytest.raises(image.ImageDecodeError, match=match):
        image.decode_image()(data)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"dtype": np.float32}, ValueError, "dtype=<class 'numpy.float32'> must be np.uint8"),
    ({"dtype": "no such"}, TypeError, "dtype='no such' is not a dtype"),
    ({"max_pixels": 0}, ValueError, "max_pixels=0 must be >= 1"),
    ({"max_pixels": 1.5}, TypeError, "max_pixels=1.5 must be an int"),
])
def test_bad_arguments_are_refused_when_built(kwargs, error, match):
    with pytest.raises(error, match=match):
        image.decode_png(**kwargs)


def test_the_udfs_print_as_built_and_pickle():
    udfs = [image.decode_jpeg(), image.decode_jpeg(max_pixels=9), image.decode_image(),
            image.decode_png(np.uint16, max_pixels=9)]
    assert [u.__qualname__ for u in udfs] == [
        "decode_jpeg", "decode_jpeg(max_pixels=9)", "decode_image",
        "decode_png(dtype=np.uint16, max_pixels=9)"]
    copy = pickle.loads(pickle.dumps(udfs[3]))
    with pytest.raises(image.ImageTooLargeError, match="max_pixels=9"):
        copy(file("png_rgb8"))


_FUZZ_SEEDS = ["jpeg_420", "jpeg_progressive", "jpeg_gray", "png_rgb16", "png_palette",
               "png_gray_alpha8", "gif", "bmp_rgb"]


def mutated(data: bytes, rng: np.random.Generator) -> bytes:
    """``data`` with a few bytes changed, cut, inserted or deleted."""
    data = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        at, kind = int(rng.integers(0, len(data))), int(rng.integers(0, 4))
        if kind == 0:
            data[at] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            data[at] = int(rng.integers(0, 256))
        elif kind == 2:
            data[at:at] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        else:
            del data[at:at + int(rng.integers(1, 9))]
    return bytes(data[:int(rng.integers(1, len(data) + 1))] if rng.random() < 0.3 else data)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # frames > 89M px
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_fuzz_every_outcome_is_an_image_of_the_declared_size_or_an_image_decode_error(dtype):
    rng = np.random.default_rng(26)
    decode, outcomes = image.decode_image(dtype, max_pixels=1 << 16), {"image": 0, "error": 0}
    for case in _FUZZ_SEEDS:
        for _ in range(1000):
            data = mutated(file(case), rng)
            try:
                out = decode(data)
            except image.ImageDecodeError:
                outcomes["error"] += 1
                continue
            kind = _image_decode.image_format(data)
            assert out.shape == (*_image_decode.header_size(data, kind), 3)
            assert out.dtype == dtype and out.shape[0] * out.shape[1] <= 1 << 16
            outcomes["image"] += 1
    assert min(outcomes.values()) > 1000  # both outcomes exercised


def test_any_function_s_decode_error_is_a_data_error():
    def parse(x):
        if x == 1:
            raise DecodeError("record 1 is garbled")
        return x

    ds = jdata.range(3).map(parse)
    with pytest.raises(jdata.DataError, match="^map: cannot decode the element at position 1 "
                       "of its input: record 1 is garbled$"):
        list(ds)
    assert [int(x) for x in ds.ignore_errors()] == [0, 2]
