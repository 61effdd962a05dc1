"""Text comparison shared by tests/asr/cer.py and benches/piper_ref.py (standard library only).

`normalise` as Whisper's BasicTextNormalizer does (lower case, symbols and punctuation to spaces,
runs of spaces to one; bracketed asides dropped), for languages written without spaces also
without spaces; `distance` the Levenshtein distance between two sequences (characters or words).
"""
import re
import unicodedata


def normalise(text, spaceless=False):
    text = re.sub(r"[<\[][^>\]]*[>\]]", "", text.lower())
    text = re.sub(r"\(([^)]+?)\)", "", text)
    text = "".join(" " if unicodedata.category(c)[0] in "MSP" and c != "'" else c for c in unicodedata.normalize("NFKC", text))
    text = " ".join(text.split())
    return text.replace(" ", "") if spaceless else text


def distance(a, b):
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[len(b)]
