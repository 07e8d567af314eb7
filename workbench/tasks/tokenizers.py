"""Tokenizers with a fixed vocabulary per task family, so a checkpoint reads any parameters of it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

TokenIds = Sequence[int] | np.ndarray | torch.Tensor


def _as_array(ids: TokenIds, vocab_size: int) -> np.ndarray:
    """``decode``'s ids as a 1-D int64 array, each in ``[0, vocab_size)``."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"decode expects 1-D ids, got shape {tuple(arr.shape)}")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise ValueError(f"token ids must be in [0, {vocab_size - 1}], got {arr.min()}..{arr.max()}")
    return arr


class CharTokenizer:
    """Printable ASCII and newline, one token per character; id 0 is padding."""

    name = "ascii"
    pad_id = 0
    alphabet = "\n" + "".join(chr(c) for c in range(32, 127))

    def __init__(self) -> None:
        self.vocab_size = len(self.alphabet) + 1
        self._table = np.full(128, -1, dtype=np.int64)  # ASCII code -> token id
        for i, ch in enumerate(self.alphabet):
            self._table[ord(ch)] = i + 1
        self._chars = np.array([""] + list(self.alphabet), dtype=object)

    def encode_array(self, text: str) -> np.ndarray:
        """Encode to an int64 array."""
        try:
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        except UnicodeEncodeError as e:
            raise ValueError(f"character {text[e.start]!r} is not in the {self.name} vocabulary") from None
        ids = self._table[codes]
        if (ids < 0).any():
            bad = text[int(np.argmax(ids < 0))]
            raise ValueError(f"character {bad!r} is not in the {self.name} vocabulary")
        return ids

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def decode(self, ids: TokenIds) -> str:
        """Padding decodes to nothing."""
        return "".join(self._chars[_as_array(ids, self.vocab_size)])


class ByteTokenizer:
    """Ids 0..255 are bytes, 256 ``<pad>``, 257 ``<bos>``: bits per byte are exact."""

    name = "bytes"
    pad_id = 256
    bos_id = 257
    vocab_size = 258

    def __init__(self) -> None:
        # bytes per token (bits-per-byte denominators)
        self.token_bytes = torch.ones(self.vocab_size, dtype=torch.long)
        self.token_bytes[self.pad_id] = 0
        self.token_bytes[self.bos_id] = 0

    def encode_bytes(self, data: bytes) -> np.ndarray:
        return np.frombuffer(data, dtype=np.uint8).astype(np.int64)

    def encode(self, text: str) -> list[int]:
        """UTF-8; never a special."""
        return list(text.encode("utf-8"))

    def decode(self, ids: TokenIds) -> str:
        """Specials dropped; broken UTF-8 (a window's cut edges) replaced."""
        arr = _as_array(ids, self.vocab_size)
        return arr[arr < 256].astype(np.uint8).tobytes().decode("utf-8", errors="replace")
