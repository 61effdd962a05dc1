// speechstream playground: speaks the server's WebSocket protocol (session.config, input.text,
// input.done, input.cancel) from the browser, plays the streamed PCM gaplessly with Web Audio and
// highlights each word while it is heard. Plain JS, no build step; served by the binary.
//
// Audio clock: every received chunk is scheduled right after the previous one on the
// AudioContext clock (`playhead`), with a short lead when playback has run dry. Each chunk records
// where it landed ({ms into the utterance, context time}), so a word's start_ms maps to the
// context time it is heard at, even across underruns. Word timings arrive in the utterance's
// trailing audio.chunk; words are highlighted against the clock from then on.
//
// window.playground.snapshot() exposes the page's state for tests.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  /** Seconds of audio queued ahead when playback starts or has run dry (network jitter). */
  const LEAD_S = 0.12;
  /** The server's idle timeout when it does not say (its default). */
  const DEFAULT_IDLE_TIMEOUT_MS = 30000;
  const LOG_LIMIT = 300;
  const MIME = { wav: 'audio/wav', flac: 'audio/flac', mp3: 'audio/mpeg', opus: 'audio/ogg', pcm: 'application/octet-stream' };

  /** Close an idle live session well before the server's idle timeout (from /playground.json) does. */
  const idleCloseMs = () => Math.round(((state.info && state.info.idle_timeout_ms) || DEFAULT_IDLE_TIMEOUT_MS) * 2 / 3);

  const state = {
    info: null,
    voicesFrom: null,
    voiceGroups: [],
    bytesReceived: 0,
    chunksScheduled: 0,
    scheduledUntil: 0,
    highlighted: [],
    errors: [],
    received: [],
    downloads: [],
    typing: false,
  };
  const utterances = [];
  let nextUtteranceId = 1;

  // ---------------------------------------------------------------- audio

  let ctx = null;
  let playhead = 0;
  const sources = new Set();

  function audioContext() {
    if (!ctx) {
      ctx = new AudioContext({ latencyHint: 'interactive' });
      setInterval(tick, 25);
    }
    if (ctx.state === 'suspended') ctx.resume().catch(() => {});
    return ctx;
  }

  function concat(a, b) {
    const out = new Uint8Array(a.length + b.length);
    out.set(a, 0);
    out.set(b, a.length);
    return out;
  }

  /** Queue s16le mono PCM of `utt` on the audio clock, right after what is already queued. */
  function playPcm(utt, bytes, rate) {
    state.bytesReceived += bytes.length;
    utt.bytes += bytes.length;
    $('bytes').textContent = state.bytesReceived.toLocaleString('en');
    if (utt.firstAudioAt === null) {
      utt.firstAudioAt = performance.now();
      renderStats(utt);
    }
    let data = utt.carry ? concat(utt.carry, bytes) : bytes;
    utt.carry = data.length % 2 ? data.slice(data.length - 1) : null;
    const n = data.length >> 1;
    if (n === 0) return;
    const startMs = (utt.samples / rate) * 1000;
    utt.samples += n;
    utt.rate = rate;
    if (utt.muted) return; // cancelled here: counted, not played
    const c = audioContext();
    const buffer = c.createBuffer(1, n, rate);
    const channel = buffer.getChannelData(0);
    const view = new DataView(data.buffer, data.byteOffset, n * 2);
    for (let i = 0; i < n; i++) channel[i] = view.getInt16(2 * i, true) / 32768;
    if (playhead < c.currentTime + 0.01) playhead = c.currentTime + LEAD_S;
    const source = c.createBufferSource();
    source.buffer = buffer;
    source.connect(c.destination);
    source.start(playhead);
    sources.add(source);
    source.onended = () => sources.delete(source);
    utt.segments.push({ ms: startMs, at: playhead });
    playhead += buffer.duration;
    utt.playEnd = playhead;
    state.scheduledUntil = playhead;
    state.chunksScheduled += 1;
    updateButtons();
  }

  /** The context time at which `ms` into `utt` is (or was) heard, or null if it never plays. */
  function clockOf(utt, ms) {
    let lo = 0;
    let hi = utt.segments.length - 1;
    if (hi < 0 || ms < utt.segments[0].ms) return null;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (utt.segments[mid].ms <= ms) lo = mid;
      else hi = mid - 1;
    }
    const seg = utt.segments[lo];
    return seg.at + (ms - seg.ms) / 1000;
  }

  function stopPlayback() {
    for (const source of sources) {
      try { source.stop(); } catch (_) { /* not started yet */ }
    }
    sources.clear();
    if (ctx) playhead = ctx.currentTime;
    state.scheduledUntil = playhead;
  }

  function isPlaying() {
    return ctx !== null && playhead > ctx.currentTime;
  }

  // ---------------------------------------------------------------- words

  function setWords(utt, timestamps) {
    utt.words = timestamps.map((t) => ({ word: String(t.word), start: t.start_ms, end: t.end_ms, el: null }));
    utt.nextWord = 0;
    const box = utt.row.querySelector('.words');
    box.textContent = '';
    const span = (w, text) => {
      const el = document.createElement('span');
      el.className = 'word';
      el.textContent = text;
      el.title = `${w.start}–${w.end} ms`;
      w.el = el;
      return el;
    };
    // Where the server says where each word is in the text (our `chars` extension, offsets in code
    // points of the stripped text), the text is shown as written, each word lit in place.
    const text = Array.from((utt.text || '').trim());
    const placed = utt.words.length > 0 && timestamps.every(
      (t) => Array.isArray(t.chars) && t.chars[0] <= t.chars[1] && t.chars[1] <= text.length);
    if (placed) {
      let at = 0;
      utt.words.forEach((w, i) => {
        const [s, e] = timestamps[i].chars;
        if (s > at) box.append(text.slice(at, s).join(''));
        box.append(span(w, text.slice(Math.max(s, at), e).join('')));
        at = Math.max(at, e);
      });
      if (at < text.length) box.append(text.slice(at).join(''));
    } else {
      utt.words.forEach((w, i) => {
        if (i) box.append(' ');
        box.append(span(w, w.word));
      });
    }
    if (utt.words.length === 0) box.textContent = utt.text;
  }

  /** Move the highlight of every utterance with timings to where the audio clock is. */
  function tick() {
    if (!ctx) return;
    const now = ctx.currentTime;
    for (const utt of utterances) {
      if (utt.shown === 'playing') showBadge(utt);
      if (!utt.words || utt.highlightDone) continue;
      const words = utt.words;
      while (utt.nextWord < words.length) {
        const w = words[utt.nextWord];
        const at = clockOf(utt, w.start);
        const cut = utt.cancelAt !== null && (at === null || at >= utt.cancelAt);
        if (cut) {
          for (let i = utt.nextWord; i < words.length; i++) words[i].el.classList.add('unspoken');
          utt.nextWord = words.length;
          break;
        }
        if (at === null || at > now) break;
        if (utt.nextWord > 0) words[utt.nextWord - 1].el.classList.replace('current', 'spoken');
        w.el.classList.add('current');
        state.highlighted.push(w.word);
        utt.nextWord += 1;
      }
      if (utt.nextWord >= words.length) {
        const last = words[words.length - 1];
        const end = last ? clockOf(utt, last.end) : null;
        const stopped = utt.cancelAt !== null ? Math.min(utt.cancelAt, end ?? Infinity) : end;
        if (!last || stopped === null || now >= stopped) {
          for (const w of words) w.el.classList.replace('current', 'spoken');
          utt.highlightDone = true;
        }
      }
    }
    updateButtons();
  }

  // ---------------------------------------------------------------- utterances (the page's list)

  function newUtterance(text) {
    const utt = {
      id: nextUtteranceId++,
      text,
      status: 'waiting',
      index: null,
      doneSentAt: null,
      startAt: null,
      firstAudioAt: null,
      audioDoneAt: null,
      samples: 0,
      rate: 24000,
      bytes: 0,
      carry: null,
      segments: [],
      playEnd: 0,
      words: null,
      nextWord: 0,
      highlightDone: false,
      cancelAt: null,
      muted: false,
      cancelled: false,
      timings: null,
      errors: [],
      row: null,
      shown: null,
    };
    const row = document.createElement('li');
    row.className = 'utterance waiting';
    row.innerHTML = '<div class="words"></div><div class="meta"><span class="badge"></span><span class="stats"></span></div>';
    row.querySelector('.words').textContent = text;
    utt.row = row;
    $('utterances').append(row);
    $('empty').hidden = true;
    utterances.push(utt);
    setStatus(utt, 'waiting');
    row.scrollIntoView({ block: 'nearest' });
    return utt;
  }

  function setStatus(utt, status) {
    utt.status = status;
    showBadge(utt);
  }

  /** The badge says `playing` while a finished utterance is still being heard. */
  function showBadge(utt) {
    const shown = utt.status === 'done' && ctx && utt.playEnd > ctx.currentTime && !utt.muted ? 'playing' : utt.status;
    if (utt.shown === shown) return;
    utt.shown = shown;
    utt.row.className = `utterance ${shown}`;
    utt.row.querySelector('.badge').textContent = shown;
  }

  function renderStats(utt) {
    const parts = [];
    if (utt.firstAudioAt !== null && utt.startAt !== null) {
      parts.push(`first audio ${Math.max(0, utt.firstAudioAt - utt.startAt).toFixed(0)} ms`);
    }
    const audioS = utt.samples / utt.rate;
    if (utt.audioDoneAt !== null && utt.startAt !== null && audioS > 0) {
      parts.push(`RTF ${((utt.audioDoneAt - utt.startAt) / 1000 / audioS).toFixed(3)}`);
    }
    if (audioS > 0) parts.push(`${audioS.toFixed(2)} s audio`);
    if (utt.timings === 'none') parts.push('no word timings');
    utt.row.querySelector('.stats').textContent = parts.join(' · ');
  }

  // ---------------------------------------------------------------- errors, status, log

  function showError(message, utt) {
    state.errors.push(message);
    const box = $('errors');
    if (!box.querySelector('.dismiss')) {
      const dismiss = document.createElement('button');
      dismiss.type = 'button';
      dismiss.className = 'dismiss';
      dismiss.textContent = 'Dismiss';
      dismiss.addEventListener('click', clearErrors);
      box.append(dismiss);
    }
    const item = document.createElement('pre');
    item.className = 'error';
    item.textContent = message;
    box.append(item);
    box.hidden = false;
    if (utt) utt.errors.push(message);
  }

  function clearErrors() {
    $('errors').textContent = '';
    $('errors').hidden = true;
  }

  function setConnection(text, kind) {
    const el = $('status');
    el.textContent = text;
    el.className = `status ${kind}`;
  }

  function log(direction, text) {
    const list = $('log');
    const item = document.createElement('li');
    item.className = direction === '→' ? 'sent' : 'received';
    item.textContent = `${direction} ${text.length > 400 ? `${text.slice(0, 400)}…` : text}`;
    list.append(item);
    while (list.children.length > LOG_LIMIT) list.firstChild.remove();
  }

  // ---------------------------------------------------------------- configuration

  function apiKey() {
    return $('api-key').value.trim();
  }

  function streamUrl(http) {
    const path = (state.info && state.info.stream_path) || '/v1/audio/speech/stream';
    const scheme = location.protocol === 'https:' ? (http ? 'https' : 'wss') : (http ? 'http' : 'ws');
    const key = apiKey();
    return `${scheme}://${location.host}${path}${key ? `?api_key=${encodeURIComponent(key)}` : ''}`;
  }

  /** The voice to ask for: the typed voice or mix when there is one, else the picker's choice
   * ('' for the engine's default). */
  function chosenVoice() {
    const typed = $('voice-mix').value.trim();
    return { voice: typed || $('voice').value, typed: typed !== '' };
  }

  /** Say under the voice fields which voice the next request uses, and dim the picker while a
   * typed voice overrides it. */
  function showVoiceChoice() {
    const { voice, typed } = chosenVoice();
    $('voice-choice').classList.toggle('typed', typed);
    $('voice-used').textContent = typed
      ? `Speaks with ${voice} (typed: the list is ignored while this field is filled in).`
      : voice ? `Speaks with ${voice}.` : 'Speaks with the engine default.';
  }

  /** The session.config text. The seed goes in verbatim so a 64-bit seed stays exact. */
  function configText(extra) {
    const config = { type: 'session.config', ...extra };
    const { voice } = chosenVoice();
    if (voice) config.voice = voice;
    const speed = $('speed').value.trim();
    if (speed !== '') config.speed = Number.isFinite(Number(speed)) ? Number(speed) : speed;
    const seed = $('seed').value.trim();
    if (seed !== '') config.seed = /^-?\d+$/.test(seed) ? '\u0000seed\u0000' : seed;
    return JSON.stringify(config).replace('"\\u0000seed\\u0000"', seed);
  }

  function liveConfigText() {
    const timings = !!(state.info && state.info.word_timestamps);
    return configText({ stream_audio: true, response_format: 'pcm', word_timestamps: timings });
  }

  // ---------------------------------------------------------------- the live session

  /** One WebSocket session with one configuration; a new configuration opens a new session. */
  class LiveSession {
    constructor(config, url) {
      this.key = `${config}\n${url}`;
      this.config = config;
      this.url = url;
      this.outbox = [];
      this.pending = new Map(); // utterance_index -> utterance, from input.done to session.done
      this.nextIndex = 0;
      this.current = null; // the utterance between audio.start and audio.done
      this.lastFinishedAt = 0;
      this.buffered = false;
      this.cancelling = false;
      this.closing = false;
      this.opened = false;
      this.errored = false;
      this.idleTimer = null;
      setConnection('connecting…', 'busy');
      const ws = new WebSocket(url);
      ws.binaryType = 'arraybuffer';
      ws.onopen = () => this.onOpen();
      ws.onmessage = (event) => this.onMessage(event.data);
      ws.onclose = (event) => this.onClose(event);
      this.ws = ws;
      this.send(config);
    }

    usable() {
      return !this.closing && this.ws.readyState <= WebSocket.OPEN;
    }

    send(text) {
      clearTimeout(this.idleTimer);
      if (this.ws.readyState === WebSocket.OPEN) {
        this.ws.send(text);
        log('→', text);
      } else {
        this.outbox.push(text);
      }
    }

    text(chunk) {
      this.buffered = true;
      this.send(JSON.stringify({ type: 'input.text', text: chunk }));
    }

    /** input.done: the buffered text becomes one utterance. */
    flush(text) {
      const utt = newUtterance(text);
      utt.index = this.nextIndex++;
      this.pending.set(utt.index, utt);
      this.buffered = false;
      this.send(JSON.stringify({ type: 'input.done' }));
      utt.doneSentAt = performance.now();
      setConnection('speaking', 'busy');
      updateButtons();
      return utt;
    }

    cancel() {
      if (this.ws.readyState > WebSocket.OPEN) return;
      this.cancelling = this.pending.size > 0 || this.buffered;
      this.send(JSON.stringify({ type: 'input.cancel' }));
      this.buffered = false;
    }

    /** Finish what is in flight, then close (session.close waits for the utterance in flight). */
    retire() {
      if (this.closing) return;
      this.closing = true;
      if (this.ws.readyState === WebSocket.OPEN) this.send(JSON.stringify({ type: 'session.close' }));
      else if (this.ws.readyState === WebSocket.CONNECTING) this.outbox.push(JSON.stringify({ type: 'session.close' }));
    }

    /** Close now: the server aborts whatever it was generating for us. */
    drop() {
      this.closing = true;
      for (const utt of this.pending.values()) {
        utt.muted = true;
        if (utt.cancelAt === null && ctx) utt.cancelAt = ctx.currentTime;
        if (utt.status === 'waiting' || utt.status === 'streaming') setStatus(utt, 'cancelled');
      }
      this.pending.clear();
      try { this.ws.close(1000, 'cancelled'); } catch (_) { /* already closing */ }
    }

    onOpen() {
      this.opened = true;
      setConnection('connected', 'ok');
      for (const text of this.outbox.splice(0)) {
        this.ws.send(text);
        log('→', text);
      }
      // Time to first audio counts from when input.done went out, not from the click.
      const now = performance.now();
      for (const utt of this.pending.values()) utt.doneSentAt = now;
    }

    utteranceFor(message) {
      return this.pending.get(message.utterance_index) || null;
    }

    onMessage(data) {
      if (typeof data !== 'string') {
        if (this.current) playPcm(this.current, new Uint8Array(data), this.current.rate);
        return;
      }
      let message;
      try {
        message = JSON.parse(data);
      } catch (_) {
        showError(`The server sent a frame that is not JSON: ${data.slice(0, 200)}`);
        return;
      }
      state.received.push(message.type);
      const chunkWithAudio = message.type === 'audio.chunk' && message.audio_b64;
      if (!chunkWithAudio) log('←', data);
      const utt = this.utteranceFor(message);
      switch (message.type) {
        case 'audio.start':
          if (!utt) break;
          this.current = utt;
          utt.rate = message.sample_rate || (state.info && state.info.sample_rate) || 24000;
          utt.startAt = Math.max(utt.doneSentAt, this.lastFinishedAt);
          setStatus(utt, 'streaming');
          break;
        case 'audio.chunk':
          if (!utt) break;
          if (message.audio_b64) {
            const raw = atob(message.audio_b64);
            const bytes = new Uint8Array(raw.length);
            for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
            playPcm(utt, bytes, message.sample_rate || utt.rate);
          } else if (Array.isArray(message.timestamps)) {
            utt.timings = 'words';
            setWords(utt, message.timestamps);
          } else {
            utt.timings = 'none';
          }
          break;
        case 'audio.done':
          if (!utt) break;
          this.current = null;
          utt.audioDoneAt = performance.now();
          if (message.cancelled) {
            utt.cancelled = true;
            if (utt.cancelAt === null && ctx) utt.cancelAt = ctx.currentTime;
            setStatus(utt, 'cancelled');
          } else {
            setStatus(utt, message.error ? 'failed' : 'done');
          }
          renderStats(utt);
          break;
        case 'session.done':
          this.lastFinishedAt = performance.now();
          if (utt) {
            this.pending.delete(message.utterance_index);
            if (utt.status === 'waiting' || utt.status === 'streaming') setStatus(utt, utt.errors.length ? 'failed' : 'done');
            if (!utt.words) utt.highlightDone = true;
          }
          if (this.cancelling) {
            // The cancel stopped one utterance; anything queued behind it goes with the session.
            this.cancelling = false;
            if (this.pending.size > 0 || this.buffered) this.drop();
          }
          this.afterUtterance();
          break;
        case 'input.cancelled':
          this.cancelling = false;
          this.afterUtterance();
          break;
        case 'error': {
          if (this.pending.size === 0 && /^Idle timeout/.test(message.message)) {
            // Not a failure: the next Speak opens a new session.
            this.closing = true;
            setConnection('closed when idle', 'idle');
            break;
          }
          const target = this.current || (this.pending.size === 1 ? [...this.pending.values()][0] : null);
          const suffix = message.partial_audio ? ' (the audio already played is incomplete)' : '';
          showError(`${message.message}${suffix}`, target);
          this.errored = true;
          if (target && target.status === 'waiting') setStatus(target, 'failed');
          break;
        }
        default:
          break;
      }
      updateButtons();
    }

    afterUtterance() {
      if (this.pending.size > 0 || this.closing) return;
      if (live === this) setConnection('connected', 'ok');
      clearTimeout(this.idleTimer);
      this.idleTimer = setTimeout(() => {
        if (this.pending.size === 0 && !this.buffered && !typer) this.retire();
      }, idleCloseMs());
    }

    async onClose(event) {
      clearTimeout(this.idleTimer);
      const why = `code ${event.code}${event.reason ? `: ${event.reason}` : ''}`;
      let reported = this.errored;
      for (const utt of this.pending.values()) {
        if (utt.status === 'waiting' || utt.status === 'streaming') {
          setStatus(utt, 'failed');
          if (!reported && this.opened) showError(`The connection closed before utterance ${utt.id} finished (${why}).`, utt);
          reported = true;
        }
      }
      // E.g. 1013 when the server is at capacity, 1001 when it shuts down.
      if (!reported && this.opened && !this.closing && event.code !== 1000 && event.code !== 1005) {
        showError(`The server closed the session (${why}).`);
      }
      this.pending.clear();
      if (live === this) {
        live = null;
        stopTyping();
        setConnection('not connected', 'idle');
      }
      if (!this.opened) {
        setConnection('connection refused', 'bad');
        showError(await refusal(this.url));
      }
      updateButtons();
    }
  }

  /** Why a WebSocket did not open: ask the same URL over plain HTTP for the status. */
  async function refusal(url) {
    const generic = `Could not open the WebSocket ${url.replace(/api_key=[^&]*/, 'api_key=…')}.`;
    try {
      const response = await fetch(streamUrl(true), { cache: 'no-store' });
      if (response.status === 401 || response.status === 403) {
        let detail = '';
        try {
          const body = await response.json();
          detail = body.detail || body.message || (body.error && body.error.message) || '';
        } catch (_) { /* not JSON */ }
        const hint = apiKey() ? 'The API key was refused.' : 'The server wants an API key: enter it above.';
        return `${hint} (HTTP ${response.status}${detail ? `: ${detail}` : ''})`;
      }
    } catch (_) { /* the server is gone */ }
    return `${generic} Is the server running${apiKey() ? ', and is the API key right' : ', and does it want an API key'}?`;
  }

  let live = null;

  function liveSession() {
    const config = liveConfigText();
    const url = streamUrl(false);
    if (live && live.usable() && live.key === `${config}\n${url}`) return live;
    if (live) live.retire();
    live = new LiveSession(config, url);
    return live;
  }

  // ---------------------------------------------------------------- actions

  function speak() {
    const text = $('text').value.trim();
    if (!text || typer) return;
    clearErrors();
    audioContext();
    const session = liveSession();
    session.text(text);
    session.flush(text);
  }

  let typer = null;

  /** Stream the text word by word, as a language model would, flushing at sentence ends. */
  function typeIt() {
    const full = $('text').value;
    const tokens = full.trim().match(/\S+\s*/g);
    if (!tokens || typer) return;
    clearErrors();
    audioContext();
    const session = liveSession();
    const area = $('text');
    area.value = '';
    area.readOnly = true;
    typer = { session, tokens, i: 0, sentence: '', timer: null, full };
    state.typing = true;
    const step = () => {
      if (!typer || typer.session !== session) return;
      const token = typer.tokens[typer.i++];
      area.value += token;
      area.scrollTop = area.scrollHeight;
      typer.sentence += token;
      session.text(token);
      const last = typer.i >= typer.tokens.length;
      if (last || /[.!?…。！？]["'”’)\]]*\s*$/.test(token) || /\n/.test(token)) {
        if (typer.sentence.trim()) session.flush(typer.sentence.trim());
        typer.sentence = '';
      }
      if (last) stopTyping();
      else typer.timer = setTimeout(step, 1000 / Math.max(1, Number($('typing-rate').value) || 8));
    };
    step();
    updateButtons();
  }

  function stopTyping() {
    if (!typer) return;
    clearTimeout(typer.timer);
    $('text').readOnly = false;
    if (typer.i < typer.tokens.length) $('text').value = typer.full;
    typer = null;
    state.typing = false;
    updateButtons();
  }

  function cancel() {
    stopTyping();
    const now = ctx ? ctx.currentTime : 0;
    for (const utt of utterances) {
      if (utt.highlightDone && utt.status !== 'waiting' && utt.status !== 'streaming') continue;
      if (utt.playEnd > now || utt.status === 'waiting' || utt.status === 'streaming') {
        utt.cancelAt = now;
        utt.muted = true;
      }
    }
    stopPlayback();
    if (live) live.cancel();
    updateButtons();
  }

  /** A non-streamed request on a session of its own: the whole file in one binary frame. */
  function download() {
    const text = $('text').value.trim();
    if (!text) return;
    clearErrors();
    const format = $('format').value;
    const button = $('download');
    button.disabled = true;
    button.textContent = 'Synthesizing…';
    const url = streamUrl(false);
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    const parts = [];
    let failed = false;
    let finished = false;
    const messages = [
      configText({ stream_audio: false, response_format: format }),
      JSON.stringify({ type: 'input.text', text }),
      JSON.stringify({ type: 'input.done' }),
    ];
    const done = () => {
      button.disabled = false;
      button.textContent = 'Download';
    };
    ws.onopen = () => {
      for (const m of messages) {
        ws.send(m);
        log('→', m);
      }
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== 'string') {
        parts.push(event.data);
        return;
      }
      log('←', event.data);
      const message = JSON.parse(event.data);
      if (message.type === 'error') {
        failed = true;
        showError(`Download: ${message.message}`);
      } else if (message.type === 'audio.done' && message.error) {
        failed = true;
      } else if (message.type === 'session.done') {
        finished = true;
        ws.send(JSON.stringify({ type: 'session.close' }));
        if (!failed && parts.length) save(new Blob(parts, { type: MIME[format] || 'application/octet-stream' }), format);
        done();
      }
    };
    ws.onclose = async () => {
      if (!finished) {
        done();
        if (!failed) showError(`Download: ${await refusal(url)}`);
      }
    };
  }

  function save(blob, format) {
    const voice = (chosenVoice().voice || 'default').replace(/[^\w-]+/g, '_');
    const name = `speechstream-${voice}-${new Date().toISOString().replace(/[:.]/g, '-')}.${format}`;
    const link = $('download-link');
    if (link.href) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(blob);
    link.download = name;
    link.textContent = `${name} (${(blob.size / 1024).toFixed(1)} KiB)`;
    link.hidden = false;
    state.downloads.push({ name, size: blob.size, type: blob.type });
    link.click();
  }

  function updateButtons() {
    const busy = (live && live.pending.size > 0) || !!typer || isPlaying();
    $('cancel').disabled = !busy;
    $('speak').disabled = !!typer;
    $('type').disabled = !!typer;
  }

  // ---------------------------------------------------------------- voices

  async function loadInfo() {
    try {
      const key = apiKey();
      const response = await fetch('/playground.json', {
        cache: 'no-store',
        headers: key ? { Authorization: `Bearer ${key}` } : {},
      });
      if (response.ok) state.info = await response.json();
    } catch (_) { /* older server: defaults */ }
    await loadVoices();
  }

  /** The server's voice list (GET /v1/audio/voices) where it has one, else the engine's
   * (/playground.json), each voice with its language (a BCP 47 tag) where either says one. */
  async function loadVoices() {
    let listed = null;
    let listedLanguages = {};
    try {
      const key = apiKey();
      const response = await fetch('/v1/audio/voices', {
        cache: 'no-store',
        headers: key ? { Authorization: `Bearer ${key}` } : {},
      });
      if (response.ok) {
        const body = await response.json();
        if (Array.isArray(body.voices)) {
          listed = body.voices
            .map((v) => (typeof v === 'string' ? { name: v } : v && { name: v.name, language: v.language }))
            .filter((v) => v && typeof v.name === 'string' && v.name);
          if (body.languages && typeof body.languages === 'object') listedLanguages = body.languages;
          state.voicesFrom = '/v1/audio/voices';
        }
      }
    } catch (_) { /* no such endpoint */ }
    const info = state.info || {};
    const engineVoices = Array.isArray(info.voices) ? info.voices.map(String) : [];
    const infoLanguages = info.voice_languages && typeof info.voice_languages === 'object' ? info.voice_languages : {};
    if (listed) {
      // `default` there is the OpenAI-style placeholder for the engine's default voice, which the
      // picker's first option already is; listed only where the engine has a voice of that name.
      const engine = new Set(engineVoices.map((v) => v.toLowerCase()));
      listed = listed.filter((v) => v.name.toLowerCase() !== 'default' || engine.has('default'));
    } else if (engineVoices.length) {
      listed = engineVoices.map((name) => ({ name }));
      state.voicesFrom = '/playground.json';
    }
    // A voice's language: a tag, or the first of a list of them.
    const tagOf = (x) => {
      const tag = Array.isArray(x) ? x[0] : x;
      return typeof tag === 'string' && tag.trim() ? tag.trim() : null;
    };
    const languageOf = (v) => tagOf(v.language) || tagOf(lookup(listedLanguages, v.name)) || tagOf(lookup(infoLanguages, v.name));
    setVoices((listed || []).map((v) => ({ name: v.name, language: languageOf(v) })));
  }

  /** `map[name]`, or failing that the entry whose key is `name` in another case (the voices
   * endpoint lowercases names). */
  function lookup(map, name) {
    if (Object.prototype.hasOwnProperty.call(map, name)) return map[name];
    const lower = name.toLowerCase();
    const key = Object.keys(map).find((k) => k.toLowerCase() === lower);
    return key === undefined ? undefined : map[key];
  }

  let languageNames = null;
  try {
    languageNames = new Intl.DisplayNames([document.documentElement.lang || 'en'], { type: 'language', languageDisplay: 'standard', fallback: 'none' });
  } catch (_) { /* an old browser: tags as they are */ }

  /** `tag` in its canonical case (`en-us` → `en-US`), or as given when it is not a valid tag. */
  function canonicalTag(tag) {
    try {
      return Intl.getCanonicalLocales(tag.replace(/_/g, '-'))[0] || tag;
    } catch (_) {
      return tag;
    }
  }

  /** A readable name for a language tag (`English (United States) — en-US`), or the tag itself. */
  function languageLabel(tag) {
    let name = null;
    try {
      name = languageNames ? languageNames.of(tag) : null;
    } catch (_) { /* not a tag Intl knows */ }
    return name && name !== tag ? `${name} — ${tag}` : tag;
  }

  const OTHER_LANGUAGE = 'Other';

  /** Fill the picker: "engine default" first, then one group per language (by name), voices
   * without a language last under "Other"; the datalist of the typed field gets every name. */
  function setVoices(voices) {
    const groups = new Map();
    for (const v of voices) {
      const tag = v.language ? canonicalTag(v.language) : null;
      const key = tag || '';
      if (!groups.has(key)) groups.set(key, { language: tag, label: tag ? languageLabel(tag) : OTHER_LANGUAGE, voices: [] });
      if (!groups.get(key).voices.includes(v.name)) groups.get(key).voices.push(v.name);
    }
    const ordered = [...groups.values()].sort((a, b) => {
      if (!a.language !== !b.language) return a.language ? -1 : 1;
      return a.label.localeCompare(b.label, 'en');
    });
    const picker = $('voice');
    const previous = picker.value;
    picker.textContent = '';
    const byDefault = document.createElement('option');
    byDefault.value = '';
    byDefault.textContent = 'engine default';
    picker.append(byDefault);
    for (const group of ordered) {
      const optgroup = document.createElement('optgroup');
      optgroup.label = group.label;
      if (group.language) optgroup.dataset.language = group.language;
      for (const name of group.voices) {
        const option = document.createElement('option');
        option.value = name;
        option.textContent = name;
        optgroup.append(option);
      }
      picker.append(optgroup);
    }
    // A reload (a new API key) keeps the choice where the voice is still there.
    picker.value = voices.some((v) => v.name === previous) ? previous : '';
    const list = $('voices');
    list.textContent = '';
    for (const v of voices) {
      const option = document.createElement('option');
      option.value = v.name;
      list.append(option);
    }
    state.voiceGroups = ordered.map((g) => ({ language: g.language, label: g.label, voices: [...g.voices] }));
    showVoiceChoice();
  }

  // ---------------------------------------------------------------- wiring

  $('speak').addEventListener('click', speak);
  $('type').addEventListener('click', typeIt);
  $('cancel').addEventListener('click', cancel);
  $('download').addEventListener('click', download);
  $('api-key').addEventListener('change', loadInfo);
  $('voice').addEventListener('change', showVoiceChoice);
  $('voice-mix').addEventListener('input', showVoiceChoice);
  $('text').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      speak();
    }
  });

  window.playground = {
    state,
    ready: loadInfo(),
    audioTime: () => (ctx ? ctx.currentTime : 0),
    audioState: () => (ctx ? ctx.state : 'none'),
    snapshot: () => ({
      ...state,
      audioTime: ctx ? ctx.currentTime : 0,
      audioState: ctx ? ctx.state : 'none',
      connected: !!live && live.ws.readyState === WebSocket.OPEN,
      voice: chosenVoice(),
      errorsShown: [...document.querySelectorAll('#errors .error')].map((e) => e.textContent),
      utterances: utterances.map((u) => ({
        id: u.id,
        index: u.index,
        text: u.text,
        status: u.status,
        bytes: u.bytes,
        audioMs: (u.samples / u.rate) * 1000,
        ttfaMs: u.firstAudioAt !== null && u.startAt !== null ? u.firstAudioAt - u.startAt : null,
        rtf: u.audioDoneAt !== null && u.startAt !== null && u.samples ? (u.audioDoneAt - u.startAt) / 1000 / (u.samples / u.rate) : null,
        cancelled: u.cancelled,
        timings: u.timings,
        words: u.words ? u.words.map((w) => w.word) : null,
        spoken: u.words ? u.words.filter((w) => w.el.classList.contains('spoken') || w.el.classList.contains('current')).map((w) => w.word) : [],
        unspoken: u.words ? u.words.filter((w) => w.el.classList.contains('unspoken')).map((w) => w.word) : [],
        statsText: u.row.querySelector('.stats').textContent,
        errors: u.errors,
      })),
    }),
  };
})();
