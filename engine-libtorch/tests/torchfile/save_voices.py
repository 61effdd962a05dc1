"""Writes Kokoro voices as .pt files in torch.save's layout, without torch (stdlib only), for
tests/torchfile.rs: the voice files hexgrad's `kokoro` package and Kokoro-FastAPI users have.

    save_voices.py VOICES.npz OUT_DIR SPEC...

Each SPEC is `VOICE:FILE[:VARIANT...]`: the table VOICE.npy of the npz written to OUT_DIR/FILE.
Variants, for the reader's other paths: `archive` (top folder `archive/` instead of the file's
stem), `offset` (the tensor a view 256 floats into a larger storage), `dict` (a dict
{VOICE: tensor} saved instead of the bare tensor), `half` (f16 storage: the table rounded),
`shape` ([510, 2, 128] instead of [510, 1, 256]), `fortran` (the same shape, column-major strides:
not contiguous).

This mirrors torch.save (torch/serialization.py, `_save` with the default zip serialization and
pickle protocol 2): a pickler whose persistent_id turns each storage into the tuple ('storage',
torch.FloatStorage, key, 'cpu', numel) and a tensor whose __reduce_ex__ is
(torch._utils._rebuild_tensor_v2, (storage, offset, size, stride, requires_grad,
OrderedDict())); records `data.pkl`, `byteorder`, `data/<key>` (aligned to 64 bytes with an `FB`
extra field, as PyTorchStreamWriter does), `version` and `.data/serialization_id`, under one top
folder. The names pickled are made importable by small stand-in modules `torch` and
`torch._utils` (pickle checks that a GLOBAL names the object it pickles).
"""

import array
import ast
import collections
import io
import struct
import sys
import types
import zipfile

torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
torch._utils = torch_utils
sys.modules.setdefault("torch", torch)
sys.modules.setdefault("torch._utils", torch_utils)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    raise NotImplementedError  # only pickled by name


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2


def storage_class(name):
    cls = type(name, (), {"__module__": "torch"})
    setattr(torch, name, cls)
    return cls


FloatStorage = storage_class("FloatStorage")
HalfStorage = storage_class("HalfStorage")


class Storage:
    def __init__(self, kind, data, numel):
        self.kind, self.data, self.numel = kind, data, numel


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2, self.args)


def npz_table(path, voice):
    """The float32 table of VOICE.npy in an npz (stdlib: numpy's .npy header parsed)."""
    with zipfile.ZipFile(path) as z:
        raw = z.read(voice + ".npy")
    assert raw[:6] == b"\x93NUMPY", voice
    major = raw[6]
    (hlen,) = struct.unpack("<H", raw[8:10]) if major == 1 else struct.unpack("<I", raw[8:12])
    start = (10 if major == 1 else 12) + hlen
    header = ast.literal_eval(raw[(10 if major == 1 else 12):start].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    values = array.array("f")
    values.frombytes(raw[start:])
    assert len(values) == 510 * 256, (voice, header["shape"], len(values))
    return values


def to_half(values):
    return struct.pack("<%de" % len(values), *values)


def save(obj, storages, path, top):
    """torch.save's zip layout of OBJ, whose storages are STORAGES (in key order)."""
    keys = {}

    def persistent_id(o):
        if isinstance(o, Storage):
            key = keys.setdefault(id(o), str(len(keys)))
            return ("storage", o.kind, key, "cpu", o.numel)
        return None

    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=2)
    pickler.persistent_id = persistent_id
    pickler.dump(obj)
    records = [("data.pkl", buf.getvalue()), ("byteorder", b"little")]
    for s in storages:
        records.append(("data/" + keys[id(s)], s.data))
    records += [("version", b"3\n"), (".data/serialization_id", b"1234567890123456789012345678901234567890")]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in records:
            info = zipfile.ZipInfo(f"{top}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            # Align the data to 64 bytes, as PyTorchStreamWriter does: an `FB` extra field.
            header = 30 + len(info.filename) + 4
            pad = -(z.fp.tell() + header) % 64
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(info, data)


import pickle  # noqa: E402  (after the stand-in modules, as torch's own import order has it)


def main():
    npz, out, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    for spec in specs:
        voice, file, *variants = spec.split(":")
        values = npz_table(npz, voice)
        size, stride, offset = [510, 1, 256], [256, 256, 1], 0
        kind, data, numel = FloatStorage, values.tobytes(), len(values)
        if "half" in variants:
            kind, data = HalfStorage, to_half(values)
        if "offset" in variants:
            pad = array.array("f", [7.0] * 256)
            data, offset, numel = pad.tobytes() + data + pad.tobytes(), 256, numel + 512
        if "shape" in variants:
            size, stride = [510, 2, 128], [256, 128, 1]
        if "fortran" in variants:
            stride = [1, 510, 510]
        storage = Storage(kind, data, numel)
        tensor = Tensor(storage, offset, size, stride)
        obj = {voice: tensor} if "dict" in variants else tensor
        top = "archive" if "archive" in variants else file.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        save(obj, [storage], f"{out}/{file}", top)


if __name__ == "__main__":
    main()
