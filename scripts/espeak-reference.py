#!/usr/bin/env python3
"""misaki 0.9.4's EspeakG2P (as hexgrad's kokoro KPipeline configures it for lang codes e, f, h,
i, p) on the espeak front end's test sentences: the reference outputs of text/tests/espeak.rs.

Each text/tests/espeak/LANG.txt (one sentence a line) gives LANG.SUFFIX, one phoneme string a
line. misaki loads espeakng-loader's espeak-ng 1.52; --library/--data point it at another build
(Debian's 1.51, which the front end uses) so that version differences are told from our rules.

    scripts/setup-espeak-reference.sh
    .venv-espeak/bin/python scripts/espeak-reference.py --suffix expected-1.52
    .venv-espeak/bin/python scripts/espeak-reference.py --suffix expected \
        --library /usr/lib/x86_64-linux-gnu/libespeak-ng.so.1 \
        --data /usr/lib/x86_64-linux-gnu/espeak-ng-data
"""
import argparse
import pathlib
import sys

from misaki.espeak import EspeakG2P  # sets espeakng-loader's library and data
from phonemizer.backend.espeak.wrapper import EspeakWrapper

# kokoro 0.9.4's pipeline.py LANG_CODES: e, f, h, i, p.
LANGUAGES = {'es': 'es', 'fr': 'fr-fr', 'hi': 'hi', 'it': 'it', 'pt-br': 'pt-br'}
ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--dir', default=str(ROOT / 'text/tests/espeak'))
    ap.add_argument('--suffix', default='expected')
    ap.add_argument('--library', help='libespeak-ng to load instead of espeakng-loader\'s')
    ap.add_argument('--data', help='espeak-ng-data directory to use with --library')
    ap.add_argument('languages', nargs='*', default=list(LANGUAGES))
    args = ap.parse_args()
    if args.library:
        EspeakWrapper.set_library(args.library)
    if args.data:
        EspeakWrapper.set_data_path(args.data)
    for name in args.languages:
        g2p = EspeakG2P(language=LANGUAGES[name])
        version = '.'.join(map(str, g2p.backend._espeak.version))
        src = pathlib.Path(args.dir) / f'{name}.txt'
        lines = src.read_text(encoding='utf-8').splitlines()
        out = [g2p(line)[0] for line in lines]
        dst = src.with_suffix(f'.{args.suffix}')
        dst.write_text(''.join(p + '\n' for p in out), encoding='utf-8')
        print(f'{name}: {len(out)} sentences with espeak-ng {version} -> {dst.name}', file=sys.stderr)


if __name__ == '__main__':
    main()
