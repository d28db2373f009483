"""The compiled rule format, urlsieve's one production matcher.

See docs/architecture.md, "The rule engine".

Rules are compiled into one flat image: hash tables, postings, fixed-size rule records
and their strings. :class:`SnapshotMatcher` answers from such an image wherever it lies:
in memory (``Filter.from_lists`` compiles there) or in a *snapshot*, the image written
to a file (``urlsieve compile``) and memory-mapped read-only by every helper process.

One job a module:

- :mod:`~urlsieve.match.snapshot.format`: the versioned layout (constants, header,
  section checks): what the bytes are, for the builder, the matcher and the extension.
- :mod:`~urlsieve.match.snapshot.build`: :class:`SnapshotBuilder` (rules in, an image
  out), :func:`compile_snapshot` and :func:`write_image` (atomic, durable writes).
- :mod:`~urlsieve.match.snapshot.matcher`: :class:`SnapshotMatcher` (lookups, verdicts,
  rules read back) and :func:`open_snapshot`.

Every public name of the three is importable from here.
"""

from __future__ import annotations

from urlsieve.exceptions import SnapshotError
from urlsieve.match.snapshot.build import (
    SnapshotBuilder,
    build_image,
    compile_snapshot,
    image_memory,
    write_image,
)
from urlsieve.match.snapshot.format import (
    FORMAT_VERSION,
    MAGIC,
    CompiledImage,
    Image,
    ImageLayout,
    SnapshotInfo,
    is_snapshot,
    read_image,
)
from urlsieve.match.snapshot.matcher import (
    RuleCache,
    SnapshotMatcher,
    open_snapshot,
    read_snapshot_info,
)

__all__ = [
    "CompiledImage",
    "FORMAT_VERSION",
    "Image",
    "ImageLayout",
    "MAGIC",
    "RuleCache",
    "SnapshotBuilder",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotMatcher",
    "build_image",
    "compile_snapshot",
    "image_memory",
    "is_snapshot",
    "open_snapshot",
    "read_image",
    "read_snapshot_info",
    "write_image",
]
