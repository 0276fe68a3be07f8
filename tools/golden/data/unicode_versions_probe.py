#!/usr/bin/env python3
"""Where the tokenizer's Unicode libraries and HF tokenizers disagree (docs/data.md, "Unicode
versions"): letters added after Unicode 14 and a composition added in Unicode 16.

    python3 tools/golden/data/unicode_versions_probe.py   (needs PyPI tokenizers; grep -P)

For each code point it prints whether HF tokenizers' Split regex (Oniguruma) counts it as \\p{L}
(one piece 'a?b') and whether PCRE2 does (grep -P, the same library and version dyncp links),
then NFC by HF tokenizers and by Python's unicodedata.
"""
import ctypes
import subprocess
import unicodedata

from tokenizers import Regex, normalizers, pre_tokenizers

LETTERS = {0x11F04: "KAWI LETTER A (15.0)", 0x1E030: "MODIFIER LETTER CYRILLIC SMALL A (15.0)",
           0x2EBF0: "CJK EXT I (15.1)", 0x1C89: "CYRILLIC CAPITAL LETTER TJE (16.0)"}
split = pre_tokenizers.Split(Regex(r"\p{L}+|[^\p{L}]+"), behavior="isolated")
for code, name in LETTERS.items():
    text = "a" + chr(code) + "b"
    hf = len(split.pre_tokenize_str(text)) == 1
    pcre = subprocess.run(["grep", "-coP", r"^\p{L}+$"], input=text + "\n", text=True,
                          capture_output=True).stdout.strip() == "1"
    print(f"U+{code:04X} {name}: letter for HF tokenizers {hf}, for PCRE2 {pcre}")
pair = "\U0001611E\U0001611F"  # GURUNG KHEMA: composes to U+16121 from Unicode 16.0
print("NFC U+1611E U+1611F: HF tokenizers",
      [f"U+{ord(c):04X}" for c in normalizers.NFC().normalize_str(pair)],
      f"Python unicodedata {unicodedata.unidata_version}",
      [f"U+{ord(c):04X}" for c in unicodedata.normalize("NFC", pair)])
utf8proc = ctypes.CDLL("libutf8proc.so.2")
utf8proc.utf8proc_unicode_version.restype = ctypes.c_char_p
print("utf8proc (NFC, Jinja string methods) Unicode", utf8proc.utf8proc_unicode_version().decode())
