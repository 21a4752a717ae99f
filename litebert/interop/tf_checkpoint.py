"""Read TensorFlow checkpoints (the "tensor bundle" format) with numpy alone: no TensorFlow at run time.

The released ALBERT models are TF1 checkpoints, a prefix naming two files:

    model.ckpt-N.index                     an SSTable (LevelDB's table format): tensor name -> BundleEntryProto
    model.ckpt-N.data-00000-of-00001       the tensors' raw little-endian bytes, back to back

The .index file, read from the end:
    footer (48 bytes)    metaindex BlockHandle, index BlockHandle (varint64 offset, varint64 size), zero padding
                         to 40 bytes, then the fixed64 magic 0xdb4775248b80fb57
    index block          one entry per data block: last key of the block -> BlockHandle of the block
    data blocks          entries sorted by key; each key shares a prefix with the previous one:
                             varint32 shared, varint32 unshared, varint32 value_size, key[shared:], value
                         and ends with uint32 restart offsets + uint32 count (for binary search; we scan)
    every block          is followed by a 5-byte trailer: compression type (0 = none) and the masked crc32c
                         of the block and that type byte
The entry under the empty key is the BundleHeaderProto (shard count, endianness); the others are
BundleEntryProto {1 dtype, 2 shape, 3 shard_id, 4 offset, 5 size, 6 crc32c (masked, fixed32), 7 slices}.
The few protobuf fields needed are decoded by hand, so the reader has no dependency beyond numpy.

Only what a released model holds is supported: whole (unpartitioned) numeric tensors, uncompressed index
blocks, little-endian data. Anything else, and any truncated or corrupt file, is a one-line
CheckpointFormatError naming the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np

from litebert.errors import CheckpointError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5  # compression type byte + fixed32 masked crc32c

# tensorflow/core/framework/types.proto DataType -> numpy dtype (little-endian, as the bundle stores it).
# bfloat16 has no numpy dtype: it is widened to float32, which represents every bf16 value exactly.
NUMPY_DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 9: "<i8", 10: "?", 14: "bfloat16",
                17: "<u2", 19: "<f2", 22: "<u4", 23: "<u8"}
UNSUPPORTED_DTYPES = {7: "string", 8: "complex64", 18: "complex128", 20: "resource", 21: "variant"}


class CheckpointFormatError(CheckpointError):
    """A TF checkpoint this reader cannot (or must not) decode: truncated, corrupt or unsupported."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives, as its BundleEntryProto says."""

    name: str
    dtype: int  # a TF DataType enum value
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    masked_crc32c: int | None
    sliced: bool  # a partitioned variable (its data lives under other keys): not supported

    @property
    def dtype_name(self) -> str:
        if self.dtype in UNSUPPORTED_DTYPES:
            return UNSUPPORTED_DTYPES[self.dtype]
        dtype = NUMPY_DTYPES.get(self.dtype)
        return f"DataType {self.dtype}" if dtype is None else "bfloat16" if dtype == "bfloat16" else np.dtype(dtype).name


# -- crc32c (Castagnoli), as TF and LevelDB use it ----------------------------------------------------------

@cache
def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[i] = c
    return table


def _crc_update(register: int, data: bytes) -> int:
    table = _crc_table().tolist()
    for byte in data:
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def crc32c(data: bytes) -> int:
    """CRC-32C of `data`. Large inputs run as many equal chunks side by side in numpy: the CRC register update
    is linear over GF(2), so each chunk's CRC can be computed from a zero register and the chunks then folded
    together with a tabulated "advance the register past m zero bytes" map. ~100x faster than a byte loop."""
    n = len(data)
    lanes = max(1024, n // 4096)
    m = n // lanes
    if n < 1 << 15 or m < 2:
        return _crc_update(0xFFFFFFFF, data) ^ 0xFFFFFFFF
    table = _crc_table()
    # Columns: one per chunk, then 1024 zero columns whose registers start at b << 8k (k < 4, b < 256):
    # after m steps they tabulate how any register advances through m bytes of zeros.
    columns = np.zeros((m, lanes + 1024), dtype=np.uint8)
    columns[:, :lanes] = np.frombuffer(data, dtype=np.uint8, count=lanes * m).reshape(lanes, m).T
    register = np.zeros(lanes + 1024, dtype=np.uint32)
    register[lanes:] = (np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]).ravel()
    for row in columns:
        register = table[(register ^ row) & 0xFF] ^ (register >> 8)
    chunk_crcs = register[:lanes].tolist()
    s0, s1, s2, s3 = (register[lanes + 256 * k: lanes + 256 * (k + 1)].tolist() for k in range(4))
    crc = 0xFFFFFFFF
    for chunk_crc in chunk_crcs:
        crc = s0[crc & 0xFF] ^ s1[(crc >> 8) & 0xFF] ^ s2[(crc >> 16) & 0xFF] ^ s3[crc >> 24] ^ chunk_crc
    return _crc_update(crc, data[lanes * m:]) ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The rotated-and-offset CRC that TF stores (so that CRCs of data containing CRCs stay well-behaved)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# -- varints and the few protobuf fields needed --------------------------------------------------------------

def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CheckpointFormatError(f"{where}: truncated or corrupt varint")
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return result, pos
        shift += 7


def _proto_fields(buf: bytes, where: str) -> dict[int, list[int | bytes]]:
    """A protobuf message as {field number: [values]}: ints for varint/fixed fields, bytes for nested ones."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos, where)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos, where)
            value = value - (1 << 64) if value >= 1 << 63 else value  # int64 fields: two's complement
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise CheckpointFormatError(f"{where}: truncated protobuf field")
            value = int.from_bytes(buf[pos:pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = _varint(buf, pos, where)
            if pos + length > len(buf):
                raise CheckpointFormatError(f"{where}: truncated protobuf field")
            value, pos = buf[pos:pos + length], pos + length
        else:
            raise CheckpointFormatError(f"{where}: unexpected protobuf wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _parse_entry(name: str, value: bytes, where: str) -> TensorInfo:
    fields = _proto_fields(value, where)
    shape: list[int] = []
    for shape_msg in fields.get(2, []):
        shape_fields = _proto_fields(shape_msg, where)
        if shape_fields.get(3, [0])[0]:
            raise CheckpointFormatError(f"{where}: tensor {name!r} has unknown rank")
        shape = [_proto_fields(dim, where).get(1, [0])[0] for dim in shape_fields.get(2, [])]
    if any(d < 0 for d in shape):
        raise CheckpointFormatError(f"{where}: tensor {name!r} has an unknown dimension in {shape}")
    first = lambda number: fields.get(number, [0])[0]  # noqa: E731 proto3: absent scalar fields are 0
    return TensorInfo(name=name, dtype=first(1), shape=tuple(shape), shard_id=first(3), offset=first(4),
                      size=first(5), masked_crc32c=fields[6][0] if 6 in fields else None, sliced=7 in fields)


# -- the SSTable ----------------------------------------------------------------------------------------------

def _read_block(data: bytes, handle: bytes, where: str) -> bytes:
    offset, pos = _varint(handle, 0, where)
    size, _ = _varint(handle, pos, where)
    end = offset + size + BLOCK_TRAILER_SIZE
    if end > len(data) - FOOTER_SIZE:
        raise CheckpointFormatError(f"{where}: truncated (a block ends at byte {end}, the file has {len(data)})")
    block, compression = data[offset:offset + size], data[offset + size]
    if compression != 0:
        raise CheckpointFormatError(f"{where}: compressed index blocks (type {compression}) are not supported")
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    if masked_crc32c(data[offset:offset + size + 1]) != stored:
        raise CheckpointFormatError(f"{where}: corrupt (checksum mismatch in the block at byte {offset})")
    return block


def _block_entries(block: bytes, where: str) -> list[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise CheckpointFormatError(f"{where}: corrupt block")
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise CheckpointFormatError(f"{where}: corrupt block (restart array larger than the block)")
    entries, key, pos = [], b"", 0
    while pos < limit:
        shared, pos = _varint(block, pos, where)
        unshared, pos = _varint(block, pos, where)
        value_size, pos = _varint(block, pos, where)
        if shared > len(key) or pos + unshared + value_size > limit:
            raise CheckpointFormatError(f"{where}: corrupt block entry")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        entries.append((key, block[pos:pos + value_size]))
        pos += value_size
    return entries


def resolve_prefix(path: str | os.PathLike) -> str:
    """The checkpoint prefix for a prefix, its .index or .data file, or a directory holding one checkpoint
    (or a TF `checkpoint` file naming the latest)."""
    path = os.fspath(path)
    if path.endswith(".index"):
        return path[: -len(".index")]
    if ".data-" in os.path.basename(path):
        return path[: path.rindex(".data-")]
    if os.path.isdir(path):
        state_file = os.path.join(path, "checkpoint")
        if os.path.isfile(state_file):
            with open(state_file, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model_checkpoint_path:"):
                        # Often a path on the machine that trained it (gs://...): look for its name here.
                        name = os.path.basename(line.split(":", 1)[1].strip().strip('"'))
                        if not os.path.isfile(os.path.join(path, name + ".index")):  # not another one instead
                            raise FileNotFoundError(f"{state_file} names {name}, which is not in {path} (no "
                                                    f"{name}.index): pass the prefix of the checkpoint to convert")
                        return os.path.join(path, name)
        prefixes = sorted(n[: -len(".index")] for n in os.listdir(path) if n.endswith(".index"))
        if len(prefixes) != 1:
            found = ", ".join(prefixes) if prefixes else "none"
            raise FileNotFoundError(f"{path}: expected one TF checkpoint (*.index) in the directory, found {found}; "
                                    "pass the checkpoint prefix, e.g. DIR/model.ckpt-best")
        return os.path.join(path, prefixes[0])
    return path


class TFCheckpoint(Mapping):
    """A TF checkpoint opened for reading, as a lazy mapping: name -> np.ndarray (read on access).

    Opening reads only the .index file; tensors are read one at a time from the .data shards, so listing a
    multi-GB checkpoint with optimizer slots costs nothing, and reading the model weights skips the slots.
    `info(name)` gives a tensor's dtype and shape without reading it."""

    def __init__(self, prefix: str | os.PathLike, verify_checksums: bool = True):
        self.prefix = resolve_prefix(prefix)
        self.verify_checksums = verify_checksums
        self.index_path = self.prefix + ".index"
        if not os.path.isfile(self.index_path):
            raise FileNotFoundError(f"{self.index_path}: no such TF checkpoint index file")
        with open(self.index_path, "rb") as f:
            data = f.read()
        where = self.index_path
        if len(data) < FOOTER_SIZE or struct.unpack_from("<Q", data, len(data) - 8)[0] != TABLE_MAGIC:
            raise CheckpointFormatError(f"{where}: truncated, or not a TF checkpoint index (no table footer)")
        footer = data[len(data) - FOOTER_SIZE:]
        _, pos = _varint(footer, 0, where)  # skip the metaindex handle (empty in TF bundles)
        _, pos = _varint(footer, pos, where)
        index_block = _read_block(data, footer[pos:], where)
        entries = [e for _, handle in _block_entries(index_block, where)
                   for e in _block_entries(_read_block(data, handle, where), where)]
        if not entries or entries[0][0] != b"":
            raise CheckpointFormatError(f"{where}: no bundle header (not a TF V2 checkpoint?)")
        header = _proto_fields(entries[0][1], where)
        self.num_shards = header.get(1, [0])[0]
        if header.get(2, [0])[0] != 0:
            raise CheckpointFormatError(f"{where}: big-endian checkpoints are not supported")
        version = _proto_fields(header[3][0], where) if 3 in header else {}
        if version.get(2, [0])[0] > 1:  # min_consumer: the oldest reader that understands this bundle
            raise CheckpointFormatError(f"{where}: bundle format version {version[2][0]} is newer than this reader")
        self._infos = {}
        for key, value in entries[1:]:
            name = key.decode("utf-8", errors="replace")
            self._infos[name] = _parse_entry(name, value, where)
        self._shard_sizes: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"TFCheckpoint({self.prefix!r}, {len(self._infos)} tensors)"

    def names(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def __len__(self) -> int:
        return len(self._infos)

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.read(name)

    def info(self, name: str) -> TensorInfo:
        if name not in self._infos:
            raise KeyError(f"{self.prefix}: no tensor {name!r}")
        return self._infos[name]

    def shard_path(self, shard_id: int) -> str:
        return f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}"

    def read(self, name: str) -> np.ndarray:
        info = self.info(name)
        if info.sliced:
            raise CheckpointFormatError(f"{self.index_path}: {name!r} is a partitioned variable; not supported")
        if info.dtype not in NUMPY_DTYPES:
            raise CheckpointFormatError(f"{self.index_path}: {name!r} has dtype {info.dtype_name}; only numeric "
                                        "tensors are supported")
        dtype = NUMPY_DTYPES[info.dtype]
        itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        count = int(np.prod(info.shape, dtype=np.int64))
        path = self.shard_path(info.shard_id)
        if info.size != count * itemsize:
            raise CheckpointFormatError(f"{self.index_path}: {name!r} claims {info.size} bytes for shape "
                                        f"{list(info.shape)} of {info.dtype_name}")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: missing data file of TF checkpoint {self.prefix}")
        if info.shard_id not in self._shard_sizes:
            self._shard_sizes[info.shard_id] = os.path.getsize(path)
        if info.offset + info.size > self._shard_sizes[info.shard_id]:
            raise CheckpointFormatError(f"{path}: truncated ({self._shard_sizes[info.shard_id]} bytes, but "
                                        f"{name!r} ends at byte {info.offset + info.size})")
        with open(path, "rb") as f:
            f.seek(info.offset)
            raw = f.read(info.size)
        if self.verify_checksums and info.masked_crc32c is not None and masked_crc32c(raw) != info.masked_crc32c:
            raise CheckpointFormatError(f"{path}: corrupt (checksum mismatch in {name!r})")
        if dtype == "bfloat16":  # the top 16 bits of a float32
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=dtype).astype(np.dtype(dtype).newbyteorder("="))
        return array.reshape(info.shape)


def load_tf_checkpoint(prefix: str | os.PathLike, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """{name: array} for the named tensors (default: all of them)."""
    checkpoint = TFCheckpoint(prefix)
    return {name: checkpoint.read(name) for name in (checkpoint.names() if names is None else names)}
