#!/usr/bin/env python3
"""piper-tts 1.8.0's phoneme ids for the Piper front end's test texts: the reference outputs of
text/tests/piper.rs.

Each text/tests/piper/NAME.txt (one text a line; `\\n` in a line stands for a line break) is read
as piper-tts reads it for a voice whose config is joe's (.cache/piper/en_US-joe-medium.onnx.json)
with `espeak.voice` set to NAME (en-us, de, es, fr, ru: the espeak voices of Piper's en_US, de_DE,
es_ES, fr_FR and ru_RU voices), or with `phoneme_type: text` for text.txt: piper's own
`PiperVoice.phonemize` (its EspeakPhonemizer on its bundled espeak-ng 1.52 and data, `[[ ]]`
blocks) and `phonemes_to_ids` with joe's `phoneme_id_map`. No model is loaded. joe's map is the
first 151 entries of piper's DEFAULT_PHONEME_ID_MAP (checked here), which goes on with 15 later
symbols (`↑`, `g`, `ʦ`, `X`, `ɝ`, `ʷ`, diacritics, and the diphthongs `aɪ` `aʊ` `ɔɪ` `eɪ` `oʊ`
that only `vowel_clusters` make): the older voices' map, dropping what they do not know.

It writes NAME.ids (per text, its sentences' ids, space-separated, the sentences separated by
tabs), NAME.phonemes (the same with each sentence's phonemes joined into a string) and
id-map.json (joe's phoneme_id_map, which the test reads).

    scripts/setup-piper.sh        # .venv-piper and .cache/piper
    .venv-piper/bin/python scripts/piper-reference.py
"""
import argparse
import json
import logging
import pathlib
import sys

from piper.config import PiperConfig
from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP, phonemes_to_ids
from piper.voice import PiperVoice

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAMES = ['en-us', 'de', 'es', 'fr', 'ru', 'misc', 'text']


def voice_for(config: dict, name: str) -> PiperVoice:
    config = json.loads(json.dumps(config))
    if name == 'text':
        config['phoneme_type'] = 'text'
    else:
        config['espeak'] = {'voice': 'en-us' if name == 'misc' else name}
    # phonemize() needs no ONNX session.
    return PiperVoice(session=None, config=PiperConfig.from_dict(config))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--dir', default=str(ROOT / 'text/tests/piper'))
    ap.add_argument('--config', default=str(ROOT / '.cache/piper/en_US-joe-medium.onnx.json'))
    ap.add_argument('names', nargs='*', default=NAMES)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # piper warns of each phoneme missing from the map
    config = json.loads(pathlib.Path(args.config).read_text(encoding='utf-8'))
    id_map = config['phoneme_id_map']
    if any(DEFAULT_PHONEME_ID_MAP.get(k) != v for k, v in id_map.items()):
        sys.exit('joe\'s phoneme_id_map is not a part of piper\'s DEFAULT_PHONEME_ID_MAP')
    out_dir = pathlib.Path(args.dir)
    (out_dir / 'id-map.json').write_text(json.dumps(id_map, ensure_ascii=False) + '\n', encoding='utf-8')
    for name in args.names:
        voice = voice_for(config, name)
        src = out_dir / f'{name}.txt'
        texts = [line.replace('\\n', '\n') for line in src.read_text(encoding='utf-8').splitlines()]
        ids, phonemes = [], []
        for text in texts:
            sentences = [s for s in voice.phonemize(text) if s]  # synthesize() skips empty ones
            ids.append('\t'.join(' '.join(map(str, phonemes_to_ids(s, id_map))) for s in sentences))
            phonemes.append('\t'.join(''.join(s) for s in sentences))
        for kind, lines in (('ids', ids), ('phonemes', phonemes)):
            dst = src.with_name(f'{name}.{kind}')
            dst.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
        n = sum(len(i.split('\t')) for i in ids if i)
        print(f'{name}: {len(texts)} texts, {n} sentences', file=sys.stderr)


if __name__ == '__main__':
    main()
