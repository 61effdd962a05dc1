"""An independent reader of torch.save files, for tests/torchfile.rs to check ours against:
Python's own zipfile and pickle (an Unpickler whose find_class and persistent_load stand in for
torch's), no torch. Prints one JSON line per tensor, in the pickle's order, named as the Rust
reader names them (dict keys and list indices joined with "."):

    {"name", "dtype", "shape", "first": [4 values], "last": [4 values], "sum"}

`sum` is the elements added in order in double precision (floats only; exact in both readers).
Floats are written as their bits (`first` and `last` as f32 bits, `sum` as f64 bits), integers as
themselves: JSON's decimal floats would not compare bit for bit.

    read_pt.py FILE.pt
"""

import array
import collections
import json
import pickle
import struct
import sys
import zipfile

TYPECODES = {"FloatStorage": ("f32", "f"), "DoubleStorage": ("f64", "d"), "HalfStorage": ("f16", "e"),
             "LongStorage": ("i64", "q"), "IntStorage": ("i32", "i"), "ShortStorage": ("i16", "h"),
             "CharStorage": ("i8", "b"), "ByteStorage": ("u8", "B"), "BoolStorage": ("bool", "B")}


class StorageType:
    def __init__(self, name):
        self.name = name


class TensorRecord:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


def rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    return TensorRecord(storage, offset, size, stride)


class Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return rebuild_tensor_v2
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage"):
            return StorageType(name)
        raise pickle.UnpicklingError(f"unexpected global {module}.{name}")

    def persistent_load(self, pid):
        kind, storage_type, key, location, numel = pid
        assert kind == "storage"
        return (storage_type.name, key, numel)


def walk(obj, name, out):
    child = lambda k: f"{name}.{k}" if name else str(k)
    if isinstance(obj, TensorRecord):
        out.append((name, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, (str, int)):
                walk(v, child(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk(v, child(i), out)


def main():
    with zipfile.ZipFile(sys.argv[1]) as z:
        (pkl,) = [n for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        top = pkl[: -len("data.pkl")]
        obj = Unpickler(z.open(pkl)).load()
        tensors = []
        walk(obj, "", tensors)
        for name, t in tensors:
            storage_name, key, numel = t.storage
            dtype, code = TYPECODES[storage_name]
            raw = z.read(f"{top}data/{key}")
            size = struct.calcsize(code)
            count = 1
            for d in t.size:
                count *= d
            # contiguous (C order) only, as the Rust reader: element i of the tensor is storage[offset + i]
            expect = 1
            for d, s in reversed(list(zip(t.size, t.stride))):
                assert d <= 1 or s == expect, (name, t.size, t.stride)
                expect *= d
            chunk = raw[t.offset * size:(t.offset + count) * size]
            values = list(struct.unpack(f"<{count}{code}", chunk)) if code == "e" else array.array(code, chunk)
            total = 0.0
            if dtype.startswith("f"):
                for x in values:
                    total += x
            if dtype.startswith("f"):
                bits = lambda xs: [struct.unpack("<I", struct.pack("<f", x))[0] for x in xs]
                first, last = bits(values[:4]), bits(values[-4:])
                total = struct.unpack("<Q", struct.pack("<d", total))[0]
            else:
                first, last = list(values[:4]), list(values[-4:])
            print(json.dumps({"name": name, "dtype": dtype, "shape": list(t.size), "first": first, "last": last,
                              "sum": total}))


if __name__ == "__main__":
    main()
