// The playground page in a real browser: Debian's chromium driven by playwright-core.
//
// Started by tests/playground.rs (`cargo test --test playground`), which runs our servers with
// the synthetic engine and passes their URLs:
//   PLAYGROUND_URL        a server that generates as fast as it can
//   PLAYGROUND_PACED_URL  one that paces its audio in real time (so a cancel lands mid-stream)
//   PLAYGROUND_KEYED_URL  one started with --api-key PLAYGROUND_API_KEY (optional: skipped without)
//   PLAYGROUND_LANGUAGES_URL  one with real voices that declare their languages: hibari's heart
//                         (en-US) and the packaged Kokoro voices (ja) (optional: skipped without)
//   PLAYGROUND_SCREENSHOT where to write a screenshot of the page (optional)
//   CHROMIUM              the browser (default /usr/bin/chromium)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { chromium } from 'playwright-core';

const URL_FAST = process.env.PLAYGROUND_URL;
const URL_PACED = process.env.PLAYGROUND_PACED_URL || URL_FAST;
const URL_KEYED = process.env.PLAYGROUND_KEYED_URL;
const API_KEY = process.env.PLAYGROUND_API_KEY;
const URL_LANGUAGES = process.env.PLAYGROUND_LANGUAGES_URL;
const SCREENSHOT = process.env.PLAYGROUND_SCREENSHOT;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT = { timeout: 30_000 };

if (!URL_FAST) throw new Error('PLAYGROUND_URL is not set: run this through `cargo test --test playground`');

// The browser reports refused WebSocket upgrades, and /v1/audio/voices where the server has no
// such route (the page then falls back to /playground.json).
const EXPECTED_CONSOLE_ERRORS = /WebSocket connection to .* failed|status of 40[134]/;

let browser;

before(async () => {
  // Playwright's plain launch gives Chromium a new, empty profile directory of its own (the
  // fresh --user-data-dir Chromium needs here) and removes it on close.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--autoplay-policy=no-user-gesture-required',
    ],
  });
});

after(async () => {
  await browser?.close();
});

async function open(url) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, acceptDownloads: true });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !EXPECTED_CONSOLE_ERRORS.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  await page.goto(url);
  await page.evaluate(() => window.playground.ready);
  return { page, context, problems };
}

const snapshot = (page) => page.evaluate(() => window.playground.snapshot());

/** Poll the page's snapshot until `predicate(snapshot, arg)` holds (polled from here: the page's
 * CSP rightly forbids eval, so the predicate cannot be shipped into it). */
async function until(page, predicate, arg) {
  const deadline = Date.now() + WAIT.timeout;
  for (;;) {
    const s = await snapshot(page);
    if (predicate(s, arg)) return s;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${predicate}; last snapshot: ${JSON.stringify(s, null, 1).slice(0, 3000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 15));
  }
}

const words = (text) => text.trim().split(/\s+/);

/** The voice picker as shown: its options outside any group, then each group's label, language
 * and voices, in order. */
const picker = (page) => page.$eval('#voice', (select) => ({
  loose: [...select.children].filter((c) => c.tagName === 'OPTION').map((o) => ({ value: o.value, text: o.textContent })),
  groups: [...select.querySelectorAll('optgroup')].map((g) => ({
    label: g.label,
    language: g.dataset.language ?? null,
    voices: [...g.querySelectorAll('option')].map((o) => o.value),
  })),
}));

/** The session.config messages the page sent, parsed from its protocol log. */
const sentConfigs = (page) => page.$$eval('#log li.sent', (items) => items
  .map((li) => li.textContent.replace(/^→ /, ''))
  .filter((text) => text.startsWith('{"type":"session.config"'))
  .map((text) => JSON.parse(text)));

test('the page loads from the binary with the engine\'s voices', async () => {
  const { page, context, problems } = await open(URL_FAST);
  assert.equal(await page.title(), 'speechstream playground');
  // The picker: the engine's default first, then the voices; the synthetic engine declares no
  // languages, so they are all under "Other".
  const shown = await picker(page);
  assert.deepEqual(shown.loose, [{ value: '', text: 'engine default' }]);
  assert.deepEqual(shown.groups.map((g) => g.label), ['Other']);
  assert.ok(shown.groups[0].voices.includes('vivian'), `voices: ${shown.groups[0].voices}`);
  assert.ok(!shown.groups[0].voices.includes('default'), 'the placeholder `default` is the first option already');
  assert.equal(await page.inputValue('#voice'), '');
  // The typed field suggests the same names.
  const suggested = await page.$$eval('#voices option', (options) => options.map((o) => o.value));
  assert.deepEqual(suggested, shown.groups[0].voices);
  for (const id of ['speak', 'type', 'cancel', 'download', 'api-key', 'voice', 'voice-mix', 'speed', 'seed', 'format']) {
    assert.ok(await page.$(`#${id}`), `#${id} missing`);
  }
  // Every field has its label (the accessible name a screen reader reads).
  assert.equal(await page.getByLabel('from the list (by language)').getAttribute('id'), 'voice');
  assert.equal(await page.getByLabel('or type a voice or mix').getAttribute('id'), 'voice-mix');
  assert.equal(await page.textContent('#voice-used'), 'Speaks with the engine default.');
  // Streamed speech takes any speed now: no note says otherwise.
  assert.doesNotMatch(await page.textContent('.settings'), /streaming needs/);
  assert.deepEqual(problems, []);
  await context.close();
});

test('speaks a sentence, plays its audio and highlights its words in order', async () => {
  const { page, context, problems } = await open(URL_FAST);
  const text = 'The quick brown fox jumps over the lazy dog.';
  await page.fill('#text', text);
  await page.selectOption('#voice', 'vivian');
  await page.click('#speak');
  let s = await until(page, (s) => s.utterances[0]?.status === 'done' && s.utterances[0].words !== null);
  const u = s.utterances[0];
  assert.ok(s.bytesReceived > 0, 'no audio received');
  assert.equal(u.bytes, s.bytesReceived);
  assert.ok(s.scheduledUntil > 0 && s.chunksScheduled > 0, 'nothing scheduled on the audio clock');
  assert.equal(s.audioState, 'running');
  assert.deepEqual(u.words, words(text));
  assert.ok(u.ttfaMs !== null && u.ttfaMs >= 0, `time to first audio: ${u.ttfaMs}`);
  assert.ok(u.rtf !== null && u.rtf > 0, `real-time factor: ${u.rtf}`);
  assert.match(u.statsText, /first audio \d+ ms · RTF \d+\.\d+ · \d+\.\d\d s audio/);
  // The highlight follows the audio clock: part-way through, some words are lit and some not.
  s = await until(page, (s, n) => s.highlighted.length > 0 && s.highlighted.length < n, u.words.length);
  const atStart = s.audioTime;
  s = await until(page, (s, n) => s.highlighted.length === n && s.utterances[0].spoken.length === n, u.words.length);
  assert.deepEqual(s.highlighted, words(text), 'words highlighted out of order');
  assert.ok(s.audioTime > atStart, 'the audio clock did not advance');
  assert.ok(s.audioTime >= s.scheduledUntil - 0.5, 'highlighting finished well before the audio');
  assert.deepEqual(s.errorsShown, []);
  assert.deepEqual((await sentConfigs(page)).map((c) => c.voice), ['vivian'], 'the picked voice was not sent');
  assert.deepEqual(problems, []);
  await context.close();
});

test('plays binary PCM frames when the engine reports no word timings', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  // The same server, described as an engine without timings: the page then asks for plain
  // streamed PCM (binary frames) instead of audio.chunk messages.
  await page.route('**/playground.json', async (route) => {
    const response = await route.fetch();
    await route.fulfill({ response, json: { ...(await response.json()), word_timestamps: false } });
  });
  await page.goto(URL_PACED);
  await page.evaluate(() => window.playground.ready);
  await page.fill('#text', 'No timings here.');
  await page.click('#speak');
  const s = await until(page, (s) => s.utterances[0]?.status === 'done');
  assert.ok(s.bytesReceived > 0 && s.chunksScheduled > 1);
  assert.equal(s.utterances[0].words, null);
  assert.ok(!s.received.includes('audio.chunk'));
  assert.match(await page.textContent('#log'), /"word_timestamps":false/);
  assert.equal(await page.textContent('.utterance .words'), 'No timings here.');
  await context.close();
});

test('types the text word by word, one utterance per sentence', async () => {
  const { page, context, problems } = await open(URL_FAST);
  const text = 'One small step. Then another one!';
  await page.fill('#text', text);
  await page.fill('#typing-rate', '20');
  await page.click('#type');
  // The text area fills in as it "types".
  await page.waitForFunction(() => {
    const v = document.getElementById('text').value;
    return v.length > 0 && v.length < 'One small step. Then another one!'.length;
  }, null, { ...WAIT, polling: 10 });
  const s = await until(
    page,
    (s) => s.utterances.length === 2 && s.utterances.every((u) => u.status === 'done') && s.highlighted.length === 6,
  );
  assert.deepEqual(s.utterances.map((u) => u.text), ['One small step.', 'Then another one!']);
  assert.deepEqual(s.highlighted, words(text));
  assert.equal(await page.inputValue('#text'), text);
  assert.deepEqual(s.errorsShown, []);
  assert.deepEqual(problems, []);
  await context.close();
});

test('cancels mid-utterance', async () => {
  const { page, context, problems } = await open(URL_PACED);
  const text = Array.from({ length: 6 }, () => 'This sentence is long enough to keep a real time engine busy for a while.').join(' ');
  await page.fill('#text', text);
  await page.click('#speak');
  await until(page, (s) => s.bytesReceived > 0);
  await page.waitForTimeout(400);
  assert.equal(await page.isEnabled('#cancel'), true);
  await page.click('#cancel');
  const s = await until(page, (s) => s.utterances[0]?.status === 'cancelled' && s.received.includes('session.done'));
  const u = s.utterances[0];
  assert.equal(u.cancelled, true, 'audio.done did not say cancelled');
  assert.equal(await page.textContent('.utterance .badge'), 'cancelled');
  assert.match(await page.textContent('#log'), /"type":"audio.done".*"cancelled":true/);
  assert.ok(u.audioMs > 0 && u.audioMs < 10_000, `audio received: ${u.audioMs} ms`);
  // Only the words generated before the cancel are timed (or none, if the engine had timed none yet).
  assert.ok(u.words === null || u.words.length < words(text).length, `words: ${u.words?.length}`);
  assert.deepEqual(s.errorsShown, []);
  // The session is still usable after the cancel.
  await page.fill('#text', 'Still here.');
  await page.click('#speak');
  await until(page, (s) => s.utterances[1]?.status === 'done');
  assert.deepEqual(problems, []);
  await context.close();
});

test('cancel while typing stops the typing and drops the sentences queued behind', async () => {
  const { page, context, problems } = await open(URL_PACED);
  const text = 'First sentence takes a while to say. Second one waits. Third one waits too. And a fourth';
  await page.fill('#text', text);
  await page.fill('#typing-rate', '50');
  await page.click('#type');
  // Every sentence is flushed before the first one's audio is over (the server paces at 1x).
  await until(page, (s) => s.utterances.length >= 3 && s.bytesReceived > 0);
  await page.click('#cancel');
  const s = await until(
    page,
    (s) => !s.typing && s.utterances.every((u) => u.status === 'cancelled' || u.status === 'failed'),
  );
  assert.equal(s.utterances[0].cancelled, true, 'the first sentence was not cancelled by the server');
  assert.deepEqual(s.errorsShown, []);
  assert.equal(await page.inputValue('#text'), text, 'the text area did not get its text back');
  // Words heard before the cancel may still be marked once their timings land; then nothing moves.
  await page.waitForTimeout(300);
  const heard = (await snapshot(page)).highlighted.length;
  await page.waitForTimeout(600);
  assert.equal((await snapshot(page)).highlighted.length, heard, 'words still highlighted after the cancel');
  await page.fill('#text', 'Fresh start.');
  await page.click('#speak');
  await until(page, (s) => s.utterances.at(-1).text === 'Fresh start.' && s.utterances.at(-1).status === 'done');
  assert.deepEqual(problems, []);
  await context.close();
});

test('shows the server\'s errors', async () => {
  const { page, context } = await open(URL_FAST);
  await page.fill('#text', 'Too fast.');
  await page.fill('#speed', '5');
  await page.click('#speak');
  await page.waitForSelector('#errors:not([hidden]) .error', WAIT);
  let shown = await page.textContent('#errors');
  assert.match(shown, /Invalid session config/);
  assert.match(shown, /less than or equal to 4/);
  let s = await until(page, (s) => s.utterances[0]?.status === 'failed');
  assert.equal(s.bytesReceived, 0);
  // Back to a valid configuration (streamed speech takes any speed in range, issue 34): it
  // speaks again and the errors are gone.
  await page.fill('#speed', '1.5');
  await page.click('#speak');
  s = await until(page, (s) => s.utterances[1]?.status === 'done');
  assert.equal(await page.isHidden('#errors'), true);
  await context.close();
});

test('downloads the text as a file from a non-streamed request', async () => {
  const { page, context, problems } = await open(URL_FAST);
  await page.fill('#text', 'Save me to a file.');
  await page.fill('#seed', '42');
  await page.selectOption('#format', 'wav');
  const [download] = await Promise.all([page.waitForEvent('download', WAIT), page.click('#download')]);
  assert.match(download.suggestedFilename(), /^speechstream-default-.*\.wav$/);
  const dir = mkdtempSync(join(tmpdir(), 'speechstream-download-'));
  const path = join(dir, 'out.wav');
  await download.saveAs(path);
  const bytes = readFileSync(path);
  rmSync(dir, { recursive: true, force: true });
  assert.equal(bytes.subarray(0, 4).toString('latin1'), 'RIFF');
  assert.equal(bytes.subarray(8, 12).toString('latin1'), 'WAVE');
  assert.ok(bytes.length > 44 + 1000);
  assert.deepEqual(problems, []);
  await context.close();
});

// Kokoro's voices under its names, one per language it speaks, and voices with no language.
const KOKORO_LIKE = {
  af_heart: 'en-US',
  am_adam: 'en-us', // a tag in another case: the same group
  bf_emma: 'en-GB',
  ef_dora: 'es-ES',
  ff_siwis: 'fr-FR',
  hf_alpha: 'hi-IN',
  if_sara: 'it-IT',
  jf_alpha: 'ja',
  pf_dora: 'pt-BR',
  zf_xiaobei: 'zh-CN',
  mystery: null,
  zz_custom: null,
};
const KOKORO_LIKE_GROUPS = [
  { label: 'Chinese (China) — zh-CN', language: 'zh-CN', voices: ['zf_xiaobei'] },
  { label: 'English (United Kingdom) — en-GB', language: 'en-GB', voices: ['bf_emma'] },
  { label: 'English (United States) — en-US', language: 'en-US', voices: ['af_heart', 'am_adam'] },
  { label: 'French (France) — fr-FR', language: 'fr-FR', voices: ['ff_siwis'] },
  { label: 'Hindi (India) — hi-IN', language: 'hi-IN', voices: ['hf_alpha'] },
  { label: 'Italian (Italy) — it-IT', language: 'it-IT', voices: ['if_sara'] },
  { label: 'Japanese — ja', language: 'ja', voices: ['jf_alpha'] },
  { label: 'Portuguese (Brazil) — pt-BR', language: 'pt-BR', voices: ['pf_dora'] },
  { label: 'Spanish (Spain) — es-ES', language: 'es-ES', voices: ['ef_dora'] },
  { label: 'Other', language: null, voices: ['mystery', 'zz_custom'] },
];

test('the picker groups voices by language, from /playground.json or from /v1/audio/voices', async () => {
  const names = Object.keys(KOKORO_LIKE);
  const tagged = Object.fromEntries(Object.entries(KOKORO_LIKE).filter(([, tag]) => tag));
  // The same server, described as an engine with Kokoro's nine languages: once by the page's own
  // JSON (`voice_languages`, no voices endpoint), once by the voices endpoint (`languages`, its
  // names lowercased, with its `default` placeholder).
  const variants = {
    'playground.json': {
      info: { voices: names, voice_languages: tagged },
      voices: null,
    },
    'v1/audio/voices': {
      info: { voices: names, voice_languages: {} },
      voices: { voices: ['default', ...names].sort(), uploaded_voices: [], aliases: {}, languages: tagged },
    },
  };
  for (const [from, variant] of Object.entries(variants)) {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.route('**/playground.json', async (route) => {
      const response = await route.fetch();
      await route.fulfill({ response, json: { ...(await response.json()), ...variant.info } });
    });
    await page.route('**/v1/audio/voices', (route) => (variant.voices
      ? route.fulfill({ json: variant.voices })
      : route.fulfill({ status: 404, json: { detail: 'Not Found' } })));
    await page.goto(URL_FAST);
    await page.evaluate(() => window.playground.ready);
    const shown = await picker(page);
    assert.deepEqual(shown.loose, [{ value: '', text: 'engine default' }], from);
    assert.deepEqual(shown.groups, KOKORO_LIKE_GROUPS, from);
    assert.equal((await snapshot(page)).voicesFrom, `/${from}`);
    await context.close();
  }
});

test('real voices by language: pick one, or type a mix that wins', { skip: !URL_LANGUAGES && 'no PLAYGROUND_LANGUAGES_URL' }, async () => {
  const { page, context, problems } = await open(URL_LANGUAGES);
  // The server's own description: the names as ever, and each voice's language beside them
  // (hibari's heart is American English, the packaged Kokoro voices Japanese; a Kokoro directory
  // may hold more voices, in other languages).
  const info = await page.evaluate(() => fetch('/playground.json').then((r) => r.json()));
  const japanese = ['jf_alpha', 'jf_gongitsune', 'jf_nezumi', 'jf_tebukuro', 'jm_kumo'];
  for (const name of ['heart', ...japanese]) assert.ok(info.voices.includes(name), `${name} not in ${info.voices}`);
  assert.equal(info.voice_languages.heart, 'en-US');
  for (const name of japanese) assert.equal(info.voice_languages[name], 'ja', name);
  // Grouped by language, each group named: one group per language the engine declares, each
  // holding exactly the voices of that language, and "Other" only for voices without one.
  const shown = await picker(page);
  assert.deepEqual(shown.loose, [{ value: '', text: 'engine default' }]);
  const expected = new Map();
  for (const name of info.voices) {
    const tag = info.voice_languages[name] ?? null;
    expected.set(tag, [...(expected.get(tag) || []), name.toLowerCase()]);
  }
  assert.deepEqual(
    shown.groups.map((g) => [g.language, [...g.voices].sort()]).sort(),
    [...expected].map(([tag, names]) => [tag, names.sort()]).sort(),
  );
  const group = (tag) => shown.groups.find((g) => g.language === tag);
  assert.equal(group('en-US').label, 'English (United States) — en-US');
  assert.equal(group('ja').label, 'Japanese — ja');
  assert.ok(group('en-US').voices.includes('heart'));
  assert.deepEqual(group('ja').voices.filter((v) => japanese.includes(v)), japanese);
  const labels = shown.groups.map((g) => g.label);
  assert.deepEqual(labels.filter((l) => l !== 'Other'), labels.filter((l) => l !== 'Other').sort(), 'groups not by name');
  // By keyboard: the picker takes focus and arrow keys move through the voices.
  await page.focus('#voice');
  await page.keyboard.press('ArrowDown');
  const first = shown.groups[0].voices[0];
  assert.equal(await page.inputValue('#voice'), first);
  assert.equal(await page.textContent('#voice-used'), `Speaks with ${first}.`);

  // A voice from the picker goes in session.config, and it speaks.
  await page.selectOption('#voice', 'jf_alpha');
  assert.equal(await page.textContent('#voice-used'), 'Speaks with jf_alpha.');
  await page.fill('#text', 'こんにちは。');
  await page.click('#speak');
  let s = await until(page, (s) => s.utterances[0]?.status === 'done');
  assert.ok(s.utterances[0].bytes > 0, 'no audio from jf_alpha');
  assert.deepEqual((await sentConfigs(page)).map((c) => c.voice), ['jf_alpha']);

  // A typed mix wins over the picker, and the page says so.
  await page.fill('#voice-mix', 'jf_alpha(2)+jm_kumo');
  assert.equal(await page.getAttribute('#voice-choice', 'class'), 'voice-choice typed');
  assert.match(await page.textContent('#voice-used'), /^Speaks with jf_alpha\(2\)\+jm_kumo \(typed: the list is ignored/);
  assert.equal(await page.inputValue('#voice'), 'jf_alpha', 'the picker keeps its choice');
  await page.click('#speak');
  s = await until(page, (s) => s.utterances[1]?.status === 'done');
  assert.ok(s.utterances[1].bytes > 0, 'no audio from the mix');
  assert.deepEqual((await sentConfigs(page)).map((c) => c.voice), ['jf_alpha', 'jf_alpha(2)+jm_kumo']);

  // Cleared, the picker's voice is back.
  await page.fill('#voice-mix', '');
  assert.equal(await page.getAttribute('#voice-choice', 'class'), 'voice-choice');
  assert.equal(await page.textContent('#voice-used'), 'Speaks with jf_alpha.');
  await page.click('#speak');
  s = await until(page, (s) => s.utterances[2]?.status === 'done');
  assert.deepEqual((await sentConfigs(page)).map((c) => c.voice), ['jf_alpha', 'jf_alpha(2)+jm_kumo', 'jf_alpha']);
  assert.deepEqual(s.errorsShown, []);
  assert.deepEqual(problems, []);
  await context.close();
});

test('with --api-key: refused without the key, works with it', { skip: !URL_KEYED && 'no PLAYGROUND_KEYED_URL' }, async () => {
  const { page, context } = await open(URL_KEYED);
  await page.fill('#text', 'Who goes there?');
  await page.click('#speak');
  await page.waitForSelector('#errors:not([hidden]) .error', WAIT);
  assert.match(await page.textContent('#errors'), /API key/);
  let s = await until(page, (s) => s.utterances[0]?.status === 'failed');
  await page.fill('#api-key', `${API_KEY}-wrong`);
  await page.click('#speak');
  await page.waitForFunction(() => /API key was refused/.test(document.getElementById('errors').textContent), null, WAIT);
  await page.fill('#api-key', API_KEY);
  await page.click('#speak');
  s = await until(page, (s) => s.utterances[2]?.status === 'done');
  assert.ok(s.utterances[2].bytes > 0);
  await context.close();
});

test('screenshot of the page mid-utterance', { skip: !SCREENSHOT && 'no PLAYGROUND_SCREENSHOT' }, async () => {
  const { page, context } = await open(URL_FAST);
  await page.selectOption('#voice', 'vivian');
  await page.click('#speak');
  await until(page, (s) => s.utterances[0]?.status === 'done');
  await page.fill('#text', 'Words light up on the audio clock, one after another, as they are heard.');
  await page.click('#speak');
  await until(page, (s) => s.utterances[1]?.words && s.utterances[1].spoken.length >= 7);
  await page.click('details.log summary');
  mkdirSync(dirname(SCREENSHOT), { recursive: true });
  await page.screenshot({ path: SCREENSHOT, fullPage: true });
  await context.close();
});
