"""common/properties.py against java.util.Properties: load, store's escaping, integers.

Every expected value below is what Java 17's ``Properties#load`` gives for the same text. When
``java`` and ``javac`` are on the PATH, a differential test also compares seeded random texts
with a Java program compiled under ``tmp_path``.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from common.properties import (
    convert_value,
    escape_key,
    escape_value,
    format_entry,
    load_properties,
    parse_properties,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\fb\n", {"a": "b"}),  # a form feed separates, it does not break the line
        ("\f a=1\n", {"a": "1"}),
        ("brokerName=a\u2028b\n", {"brokerName": "a\u2028b"}),  # no line break in Java
        ("a=x\x85y\x0bz\n", {"a": "x\x85y\x0bz"}),
        ("a=x\\ \n", {"a": "x "}),  # an escaped trailing space stays
        ("a=b \t\n", {"a": "b \t"}),  # so does plain trailing whitespace
        ("\\\n!10a\nb=1\n", {"b": "1"}),  # a lone backslash continues nothing: a comment
        ("\\\n\nb=y\n", {"b": "y"}),
        ("\\", {}),  # Java makes a "" key of it; skipped here
        ("a=1\\\r\nb\r\nc=2\r", {"a": "1b", "c": "2"}),
        ("a=1\\\n  #x\n", {"a": "1#x"}),
        ("a=x\\\n\nb=y\n", {"a": "x", "b": "y"}),
        ("a=x\\\n   \nb=y\n", {"a": "x", "b": "y"}),
        ("a : = b\n", {"a": "= b"}),
        ("a==b\n", {"a": "=b"}),
        ("k\\ e\\=y\\:z=v\n", {"k e=y:z": "v"}),
        ("a=\\u00e9\\u00E9\n", {"a": "éé"}),
        ("a=\\  b\n", {"a": "  b"}),
        ("a=\\q\\\\\n", {"a": "q\\"}),
        ("a=1\rb=2\r", {"a": "1", "b": "2"}),
    ],
)
def test_load_as_java(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


@pytest.mark.parametrize(
    "text", ["a=\\u12\n", "a=\\u004\n", "a=\\u0_41\n", "a=\\u+041\n", "a=\\u 00a\n", "\\u00g1=x\n"]
)
def test_unicode_escape_needs_four_hex_digits(text: str) -> None:
    with pytest.raises(ValueError, match="malformed \\\\uXXXX escape"):
        parse_properties(text)


def test_parse_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "b.conf"
    path.write_text("# broker\nbrokerId=0\nbrokerName=b\\uZZ12\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r'b\.conf:3: malformed \\uXXXX escape "\\uZZ12" \('):
        load_properties(path)
    path.write_text("a=1\nlist=x,\\\n  y\\u12\n", encoding="utf-8")  # on a continuation line
    with pytest.raises(ValueError, match=r"b\.conf:3: "):
        load_properties(path)
    with pytest.raises(ValueError, match=r"^line 2: "):
        parse_properties("a=1\nb=\\u1\n")


def test_a_file_that_is_not_utf8_is_read_as_iso_8859_1(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.conf"
    latin1.write_bytes(b"brokerName=br\xe9ker\n")
    assert load_properties(latin1) == {"brokerName": "bréker"}
    utf8 = tmp_path / "utf8.conf"
    utf8.write_bytes("brokerName=bréker\n".encode())
    assert load_properties(utf8) == {"brokerName": "bréker"}


@pytest.mark.parametrize("raw", ["1_000", "0x10", "1e3", "١٢٣", "", "+", "1 0"])
def test_integers_are_what_java_parse_int_reads(raw: str) -> None:
    message = f"property 'k': expected an integer, got {raw!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        convert_value("k", raw, int)


def test_integers_with_sign_and_spaces() -> None:
    assert convert_value("k", "+5", int) == 5
    assert convert_value("k", " -7 ", int) == -7


def test_store_escaping() -> None:
    assert escape_value("C:\\data\\new") == "C:\\\\data\\\\new"
    assert escape_value(" lead") == "\\ lead"
    assert escape_value("a:b=c#d!e f") == "a:b=c#d!e f"  # only keys need these escaped
    assert escape_value("t\tn\nr\rf\f") == "t\\tn\\nr\\rf\\f"
    assert escape_key("a b=c:d#e!f\\") == "a\\ b\\=c\\:d\\#e\\!f\\\\"
    assert format_entry("storePathRootDir", Path("C:\\data\\new")) == (
        "storePathRootDir=C:\\\\data\\\\new"
    )
    assert format_entry("flag", True) == "flag=true"


def _random_text(rng: random.Random, alphabet: str, longest: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


def test_store_output_reads_back() -> None:
    rng = random.Random(42)
    alphabet = " \t\f\r\n\\=:#!ab\u2028\x85é"
    for _ in range(2000):
        key = _random_text(rng, alphabet, 8) or "k"
        value = _random_text(rng, alphabet, 12)
        assert parse_properties(format_entry(key, value) + "\n") == {key: value}


_JAVA = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
public class Dump {
  static String esc(String s) {
    StringBuilder b = new StringBuilder();
    for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
    return b.toString();
  }
  public static void main(String[] args) throws Exception {
    for (String f : args) {
      Properties p = new Properties();
      try (Reader r = new InputStreamReader(new FileInputStream(f), StandardCharsets.UTF_8)) {
        p.load(r);
      } catch (IllegalArgumentException e) { System.out.println("ERROR"); continue; }
      TreeMap<String, String> t = new TreeMap<>();
      for (String k : p.stringPropertyNames()) t.put(k, p.getProperty(k));
      StringBuilder sb = new StringBuilder("OK");
      for (Map.Entry<String, String> e : t.entrySet())
        sb.append(" ").append(esc(e.getKey())).append("=").append(esc(e.getValue()));
      System.out.println(sb);
    }
  }
}
"""


def _hex(text: str) -> str:
    return "".join(f"{ord(c):04x}" for c in text)


def _python_dump(text: str) -> str:
    try:
        props = parse_properties(text)
    except ValueError:
        return "ERROR"
    return " ".join(["OK"] + [f"{_hex(k)}={_hex(v)}" for k, v in sorted(props.items())])


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None, reason="no Java")
def test_differential_against_java(tmp_path: Path) -> None:
    """Seeded random texts (and -p style lines) parse as Java parses them, but for Java's
    ``""`` key from an empty last logical line."""
    (tmp_path / "Dump.java").write_text(_JAVA, encoding="utf-8")
    subprocess.run(["javac", "Dump.java"], cwd=tmp_path, check=True, timeout=120)
    rng = random.Random(7)
    pieces = [*"ab=: \t\f\\\n\r#!u04Fx\x0b\u2028\x85", "\r\n", "\\u0041", "\\\n", " \\\n "]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(1500)]
    texts += [format_entry(_random_text(rng, " =:#!\\\ta", 6) or "k", "x\\ \t") for _ in range(50)]
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"{i}.properties"
        path.write_bytes(text.encode("utf-8"))
        paths.append(str(path))
    out = subprocess.run(
        ["java", "-cp", str(tmp_path), "Dump", *paths],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    assert len(out) == len(texts)
    for text, java in zip(texts, out, strict=True):
        python = _python_dump(text)
        if "=" in java.split(" "):  # Java's "" key of an empty last line: skipped here
            java = " ".join(e for e in java.split(" ") if not e.startswith("="))
            python = " ".join(e for e in python.split(" ") if not e.startswith("="))
        assert python == java, repr(text)
