// raftlock's web console. It reads the HTTP API of the node that served it, with the token
// entered in the page, which stays in this script's memory: never in a URL, a cookie or
// storage. Every value is shown as text (textContent), never parsed as markup: lock names,
// values and session names are user data.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  let token = '';
  let prefix = '';
  // generation ends the loops of an older token or prefix; controller aborts their requests.
  let generation = 0;
  let controller = new AbortController();

  const locks = new Map();    // name -> lock as the API answers it
  const grants = new Map();   // name -> {token, since, exact}: when this page saw the grant
  const sessions = new Map(); // id -> session
  let mode = '';              // 'watch' or 'poll'
  let lastUpdate = 0;
  // loaded says which sections had their first answer (or error) since the last restart.
  const loaded = { locks: false, sessions: false, cluster: false };
  let sessionFilter = '';     // text a session's name or id must contain to be shown
  let selected = '';          // the session a lock's holder link pointed at
  let clockOffset = 0;        // the node's clock minus this browser's, when they differ by > 2s

  // sleep waits ms, or less if signal aborts.
  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  // api GETs a path of the API and returns its JSON body, or throws an Error carrying the
  // API's error code and message.
  async function api(path, signal, method) {
    const headers = { Accept: 'application/json' };
    if (token) headers['X-Raftlock-Token'] = token;
    const r = await fetch(path, { method: method || 'GET', headers, signal, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' });
    noteClock(r.headers.get('Date'));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw apiError(r.status, body, r.statusText);
    return body;
  }

  // apiError is an Error carrying the API's error code and message (an error body's).
  function apiError(status, body, text) {
    const detail = body && body.error ? body.error : { code: 'http_' + status, message: text || '' };
    const err = new Error(detail.code + ': ' + detail.message);
    err.status = status;
    err.code = detail.code;
    return err;
  }

  // streamed counts the events that arrived through the streams: the page's proof (and the
  // tests') that what it shows came pushed, not asked for again.
  let streamed = 0;

  // stream GETs a path of the API as Server-Sent Events and hands each event to
  // onEvent(name, data) as it arrives, until the server ends the stream: it returns the error
  // of the stream's end event (or null when the stream just closed), or {plain: body} when the
  // node answered one JSON body instead (a node without streams). It reads the stream with
  // fetch, not EventSource, which cannot send the token header: the token goes into no URL.
  async function stream(path, signal, onEvent) {
    const headers = { Accept: 'text/event-stream' };
    if (token) headers['X-Raftlock-Token'] = token;
    const r = await fetch(path, { headers, signal, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' });
    noteClock(r.headers.get('Date'));
    if (!r.ok || !(r.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
      let body = null;
      try { body = await r.json(); } catch (e) { body = null; }
      if (!r.ok) throw apiError(r.status, body, r.statusText);
      return { plain: body };
    }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let name = 'message';
    let data = '';
    let ended = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return ended;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data !== '') {
            const d = JSON.parse(data);
            streamed++;
            if (name === 'end') ended = apiError(0, d, '');
            else onEvent(name, d);
          }
          name = 'message';
          data = '';
          continue;
        }
        if (line[0] === ':') continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let v = i < 0 ? '' : line.slice(i + 1);
        if (v[0] === ' ') v = v.slice(1);
        if (field === 'event') name = v;
        else if (field === 'data') data += (data ? '\n' : '') + v;
      }
    }
  }

  // backoff is how long to wait before opening a stream again after its nth failure in a row.
  const backoff = (n) => Math.min(30000, 500 * 2 ** Math.min(n, 6));

  // noteClock estimates how far the node's clock is from this browser's, from an answer's
  // Date header (whole seconds): the grant and renewal times the API gives are the leader's.
  // Differences within two seconds are taken as none.
  function noteClock(date) {
    const t = date ? Date.parse(date) : NaN;
    if (Number.isNaN(t)) return;
    const d = t + 500 - Date.now();
    clockOffset = Math.abs(d) > 2000 ? d : 0;
  }

  // since returns how long ago an RFC 3339 time of the leader was, in ms, or null.
  function since(iso) {
    const t = typeof iso === 'string' ? Date.parse(iso) : NaN;
    return Number.isNaN(t) ? null : Math.max(0, Date.now() + clockOffset - t);
  }

  // goDuration parses a Go duration string ("1m30.5s", "250ms") into ms, or null.
  function goDuration(str) {
    if (typeof str !== 'string' || str === '') return null;
    if (str === '0') return 0;
    const unit = { ns: 1e-6, us: 1e-3, '\u00b5s': 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
    const re = /([0-9]+(?:\.[0-9]*)?)(ns|us|\u00b5s|ms|s|m|h)/gy;
    let total = 0;
    let m;
    let at = 0;
    while ((m = re.exec(str)) !== null) { total += parseFloat(m[1]) * unit[m[2]]; at = re.lastIndex; }
    return at === str.length ? total : null;
  }

  // explain turns an API error into a sentence for this page.
  function explain(err) {
    if (err.status === 401) return token ? 'The token is unknown to the cluster.' : 'This cluster runs with ACLs: enter a token above.';
    return err.message;
  }

  // done marks a section's first answer: its loading note goes.
  function done(section) {
    loaded[section] = true;
    $(section + '-loading').hidden = true;
  }

  function showError(id, err) {
    const el = $(id);
    el.hidden = !err;
    el.textContent = err ? explain(err) : '';
  }

  // el makes an element with text (or child nodes) and attributes, never markup.
  function el(tag, content, attrs) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of [].concat(content === undefined || content === null ? [] : content)) {
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function replaceRows(table, rows) {
    table.tBodies[0].replaceChildren(...rows);
  }

  function ago(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
  }

  // noteGrant remembers when this page first saw a lock's current grant: exactly, from a
  // change the watch reported, or at least since the page loaded the list.
  function noteGrant(l, exact) {
    if (!l.held) { grants.delete(l.name); return; }
    const g = grants.get(l.name);
    if (!g || g.token !== l.token) grants.set(l.name, { token: l.token, since: Date.now(), exact });
  }

  function replaceLocks(list) {
    locks.clear();
    for (const l of list) { locks.set(l.name, l); noteGrant(l, false); }
    for (const name of grants.keys()) if (!locks.has(name)) grants.delete(name);
  }

  function applyChanges(list) {
    for (const l of list) {
      if (!l.held && !l.waiters) { locks.delete(l.name); grants.delete(l.name); continue; }
      locks.set(l.name, l);
      noteGrant(l, true);
    }
  }

  // watchLocks keeps the lock table live through the streamed watch of the prefix (GET
  // /v1/locks?prefix=P&index=N as Server-Sent Events): a reset event gives the whole prefix, each
  // change event what one command did, and a stream that ends is opened again from the last
  // index it reported, so that nothing is missed or shown twice. A node without streams is
  // watched with blocking queries (legacyLocks).
  async function watchLocks(gen, signal) {
    let index = 0;
    let failures = 0;
    while (gen === generation) {
      try {
        const list = '/v1/locks?prefix=' + encodeURIComponent(prefix);
        const res = await stream(list + '&index=' + index, signal, (name, d) => {
          if (gen !== generation) return;
          if (name === 'reset' && Array.isArray(d.locks)) replaceLocks(d.locks);
          else if (name === 'change') applyChanges(d.locks);
          else if (name !== 'progress' && name !== 'reset') return;
          if (name !== 'reset' || Array.isArray(d.locks)) index = d.index;
          mode = 'stream';
          failures = 0;
          lastUpdate = Date.now();
          done('locks');
          showError('locks-error', null);
          renderLocks();
        });
        if (gen !== generation) return;
        if (res && res.plain) return legacyLocks(gen, signal, res.plain);
        if (res) throw res; // the end event's error: open it again, after a pause
      } catch (err) {
        if (signal.aborted || gen !== generation) return;
        if (err.status || !mode) {
          // Refused (a missing token, a prefix it may not read): nothing to show.
          locks.clear();
          grants.clear();
          index = 0;
          done('locks');
          renderLocks();
        }
        showError('locks-error', err);
        await sleep(backoff(failures++), signal);
      }
    }
  }

  // legacyLocks watches the prefix of a node without streams, from its first answer: through
  // blocking queries (GET /v1/locks?prefix=P&index=N&wait=D) where it has prefix watches, else by
  // reading the list twice a second.
  async function legacyLocks(gen, signal, first) {
    let b = first;
    let index = 0;
    const watch = typeof b.reset === 'boolean';
    const list = '/v1/locks?prefix=' + encodeURIComponent(prefix);
    while (gen === generation) {
      try {
        if (b === null) b = await api(watch ? list + '&index=' + index + (index ? '&wait=60s' : '') : list, signal);
        if (gen !== generation) return;
        if (watch && !b.reset) applyChanges(b.locks); else replaceLocks(b.locks);
        if (watch) index = b.index;
        mode = watch ? 'watch' : 'poll';
        b = null;
        lastUpdate = Date.now();
        done('locks');
        showError('locks-error', null);
        renderLocks();
        if (!watch) await sleep(500, signal);
      } catch (err) {
        if (signal.aborted || gen !== generation) return;
        b = null;
        locks.clear();
        grants.clear();
        done('locks');
        renderLocks();
        showError('locks-error', err);
        index = 0;
        await sleep(1000, signal);
      }
    }
  }

  // watchView keeps a view live through its stream (GET path as Server-Sent Events): show(v) for
  // each view the node sends, fail(err) when it is refused. A node without the stream answers
  // the view once; it is then read again every two seconds.
  async function watchView(gen, signal, path, event, show, fail) {
    let failures = 0;
    while (gen === generation) {
      try {
        const res = await stream(path, signal, (name, d) => {
          if (gen !== generation || name !== event) return;
          failures = 0;
          show(d);
        });
        if (gen !== generation) return;
        if (res && res.plain) {
          show(res.plain);
          await sleep(2000, signal);
          continue;
        }
        if (res) throw res;
      } catch (err) {
        if (signal.aborted || gen !== generation) return;
        fail(err);
        await sleep(backoff(failures++), signal);
      }
    }
  }

  // loadNode names the node and its version, once: neither changes while the page is open.
  async function loadNode(signal) {
    try {
      const h = await api('/v1/health', signal);
      $('node').textContent = 'node ' + h.id + ' \u00b7 version ' + h.version;
    } catch (err) {
      $('node').textContent = '';
    }
  }

  function watchCluster(gen, signal) {
    return watchView(gen, signal, '/v1/cluster', 'cluster', (c) => {
      renderCluster(c);
      done('cluster');
      showError('cluster-error', null);
    }, (err) => {
      done('cluster');
      renderCluster(null);
      if (err.status === 403 || err.code === 'forbidden') err.message = 'This token may not read the cluster: it needs operator:read.';
      showError('cluster-error', err);
    });
  }

  function watchSessions(gen, signal) {
    return watchView(gen, signal, '/v1/sessions', 'sessions', (b) => {
      const at = Date.now();
      sessions.clear();
      for (const s of b.sessions) {
        const left = goDuration(s.expires_in);
        // When the leader frees it unless renewed, on this browser's clock.
        s.deadline = left === null ? null : at + left;
        sessions.set(s.id, s);
      }
      done('sessions');
      showError('sessions-error', null);
      renderSessions();
      renderLocks();
    }, (err) => {
      sessions.clear();
      done('sessions');
      showError('sessions-error', err);
      renderSessions();
    });
  }

  function renderCluster(c) {
    const facts = $('cluster-facts');
    facts.replaceChildren();
    if (!c) { replaceRows($('members'), []); return; }
    const fact = (k, v) => facts.append(el('dt', k), el('dd', v === '' ? '—' : v));
    fact('leader', c.leader);
    fact('term', c.term);
    fact('commit index', c.commit_index);
    fact('applied index', c.applied_index);
    fact('log store', c.log_store);
    fact('version', c.version);
    fact('features', (c.features || []).join(', '));
    const opt = (v) => (v === undefined || v === null ? '—' : v);
    replaceRows($('members'), c.members.map((m) => el('tr', [
      el('td', m.id, { class: m.leader ? 'name leader' : 'name' }),
      el('td', m.suffrage),
      el('td', m.leader ? 'leader' : ''),
      el('td', opt(m.applied_index), { class: 'num' }),
      el('td', opt(m.lag), { class: 'num' }),
      el('td', opt(m.version)),
      el('td', m.http_addr),
      el('td', m.raft_addr),
    ], { 'data-member': m.id })));
  }

  // holderText names a grant's session: its name where this token may see the session, its id
  // (shortened), or "hidden" where the API left the id out.
  function holderText(sessionID, name) {
    if (!sessionID) return 'hidden (another token\u2019s session)';
    const s = sessions.get(sessionID);
    const id = sessionID.slice(0, 8) + '\u2026';
    const n = name || (s && s.name);
    return n ? n + ' (' + id + ')' : id;
  }

  // sessionLink names a session as a link to its row in the sessions table; a session the API
  // did not name (another token's) is plain text. The id goes into no URL: it is the session's
  // capability.
  function sessionLink(sessionID, name) {
    const text = holderText(sessionID, name);
    if (!sessionID) return text;
    const b = el('button', text, { type: 'button', class: 'link session-link', 'data-session-link': sessionID, title: 'show session ' + sessionID });
    b.addEventListener('click', () => showSession(sessionID));
    return b;
  }

  // showSession selects a session's row, clearing a filter that would hide it.
  function showSession(id) {
    selected = id;
    const s = sessions.get(id);
    if (s && !matches(s)) { sessionFilter = ''; $('session-filter').value = ''; }
    renderSessions();
    const row = document.querySelector('#sessions tbody tr.selected');
    if (row) row.scrollIntoView({ block: 'center' });
    else note(false, 'Session ' + id + ' is not among the sessions this token may see (it needs operator:read to see others\u2019).');
  }

  // note shows the outcome of an action above the sessions table.
  function note(ok, text) {
    const n = $('session-action');
    n.hidden = !text;
    n.className = ok ? 'ok' : 'bad';
    n.textContent = text || '';
  }

  // heldFor says how long a holder has held its grant: from the grant time the API gives
  // ("since"), else at least since this page saw the grant (an older server).
  function heldFor(l, h, now) {
    const ms = since(h.since);
    if (ms !== null) return { text: ago(ms), title: 'granted ' + h.since + ' (the leader\u2019s clock)' };
    const g = grants.get(l.name);
    if (!g) return { text: '\u2014', title: '' };
    return { text: (g.exact ? '' : '\u2265 ') + ago(now - g.since), title: g.exact ? '' : 'held at least this long: since this page loaded the list' };
  }

  function renderLocks() {
    const now = Date.now();
    const rows = [...locks.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).map((l) => {
      const holders = l.holders && l.holders.length ? l.holders : (l.held ? [{ session: l.session, token: l.token, value: l.value, since: l.since }] : []);
      const holderCell = holders.length
        ? holders.map((h) => el('div', [sessionLink(h.session)].concat(h.mode ? [' \u00b7 ' + h.mode] : []), { class: 'holder' }))
        : 'free';
      const tokenCell = holders.length ? holders.map((h) => el('div', h.token, { class: 'holder' })) : '\u2014';
      const valueCell = holders.length ? holders.map((h) => el('div', h.value, { class: 'holder' })) : '';
      const ageCell = holders.length ? holders.map((h) => { const a = heldFor(l, h, now); return el('div', a.text, { class: 'holder', title: a.title }); }) : '\u2014';
      const queue = Array.isArray(l.queue) ? l.queue : null;
      const waitCell = queue && queue.length
        ? queue.map((q, i) => {
          const w = since(q.since);
          const parts = [(i + 1) + '. ', sessionLink(q.session, q.name)];
          if (q.mode) parts.push(' \u00b7 ' + q.mode);
          if (w !== null) parts.push(' \u00b7 waiting ' + ago(w));
          return el('div', parts, { class: 'queue', title: q.since ? 'waiting since ' + q.since : '' });
        })
        : String(l.waiters || 0);
      const holderSession = l.held && l.session ? sessions.get(l.session) : undefined;
      const limit = l.limit ? ' (limit ' + l.limit + ')' : '';
      return el('tr', [
        el('td', l.name + limit, { class: 'name' }),
        el('td', holderCell),
        el('td', tokenCell, { class: 'num' }),
        el('td', valueCell, { class: 'value' }),
        el('td', ageCell, { class: 'num age' }),
        el('td', waitCell, { class: 'waiters' }),
        el('td', holderSession ? holderSession.lock_delay : '\u2014'),
      ], { 'data-lock': l.name });
    });
    replaceRows($('locks'), rows);
    $('locks-empty').hidden = rows.length > 0 || !loaded.locks;
    const how = mode === 'stream' ? 'live (stream)' : mode === 'watch' ? 'live (prefix watch)' : mode === 'poll' ? 'read twice a second' : 'loading\u2026';
    $('status').textContent = how + (lastUpdate ? ' \u00b7 updated ' + new Date(lastUpdate).toLocaleTimeString() : '') + (token ? ' \u00b7 token in use' : '');
    $('status').dataset.streamed = String(streamed);
  }

  // matches says whether a session passes the filter (its name or id contains the text).
  function matches(s) {
    if (!sessionFilter) return true;
    const f = sessionFilter.toLowerCase();
    return (s.name || '').toLowerCase().includes(f) || s.id.toLowerCase().includes(f);
  }

  function renderSessions() {
    const now = Date.now();
    const all = [...sessions.values()].sort((a, b) => a.created_index - b.created_index);
    const shown = all.filter(matches);
    const rows = shown.map((s) => {
      const left = s.deadline === null || s.deadline === undefined ? '\u2014' : ago(Math.max(0, s.deadline - now));
      const renewed = since(s.last_renewal);
      const waits = Array.isArray(s.waiting) && s.waiting.length
        ? s.waiting.map((w) => { const a = since(w.since); return el('div', w.lock + (a === null ? '' : ' \u00b7 ' + ago(a)), { class: 'holder' }); })
        : '\u2014';
      const destroy = el('button', 'Destroy', { type: 'button', class: 'danger destroy', 'data-destroy': s.id });
      destroy.addEventListener('click', () => askDestroy(s.id));
      return el('tr', [
        el('td', s.name || '\u2014', { class: 'name' }),
        el('td', s.id, { class: 'value' }),
        el('td', s.ttl),
        el('td', left, { class: 'num left', title: s.deadline ? 'freed unless renewed before then (the leader\u2019s timer)' : 'only the leader knows' }),
        el('td', renewed === null ? (s.expires_in ? 'none yet' : '\u2014') : ago(renewed) + ' ago',
          { class: 'num renewed', title: s.last_renewal || (s.expires_in ? 'no renewal since the session was created or the leader took over' : '') }),
        el('td', s.lock_delay),
        el('td', s.locks.length ? s.locks.map((n) => el('div', n, { class: 'holder' })) : '\u2014', { class: 'value' }),
        el('td', waits, { class: 'value waits' }),
        el('td', destroy),
      ], { 'data-session': s.id, class: s.id === selected ? 'selected' : '' });
    });
    replaceRows($('sessions'), rows);
    $('sessions-empty').hidden = all.length > 0 || !loaded.sessions;
    $('sessions-filtered').hidden = all.length === 0 || shown.length > 0;
  }

  // askDestroy opens the confirmation of a session's destruction.
  let destroying = '';
  function askDestroy(id) {
    const s = sessions.get(id);
    destroying = id;
    const held = s && s.locks.length ? ' It holds ' + s.locks.join(', ') + '.' : ' It holds no lock.';
    $('destroy-text').textContent = 'Session ' + (s && s.name ? s.name + ' (' + id + ')' : id) + '.' + held;
    $('destroy-dialog').showModal();
  }

  // destroy destroys a session (DELETE /v1/sessions/{id}); the server judges the token.
  async function destroy(id) {
    const s = sessions.get(id);
    const what = 'session ' + (s && s.name ? s.name + ' (' + id.slice(0, 8) + '\u2026)' : id);
    try {
      const b = await api('/v1/sessions/' + encodeURIComponent(id), controller.signal, 'DELETE');
      sessions.delete(id);
      const released = b && b.released && b.released.length ? ': released ' + b.released.join(', ') : '';
      note(true, 'Destroyed ' + what + released + '.');
    } catch (err) {
      if (err.name === 'AbortError') return;
      if (err.status === 403) note(false, 'Refused (403 forbidden): this token may not destroy ' + what + '. ' + err.message);
      else if (err.status === 404) { sessions.delete(id); note(false, 'The ' + what + ' was already gone.'); }
      else note(false, 'Could not destroy ' + what + ': ' + explain(err));
    }
    renderSessions();
  }

  // restart stops the loops of the old token or prefix and starts new ones.
  function restart() {
    generation++;
    controller.abort();
    controller = new AbortController();
    locks.clear();
    grants.clear();
    sessions.clear();
    mode = '';
    lastUpdate = 0;
    for (const k of Object.keys(loaded)) { loaded[k] = false; $(k + '-loading').hidden = false; }
    note(true, '');
    renderLocks();
    renderSessions();
    loadNode(controller.signal);
    watchLocks(generation, controller.signal);
    watchCluster(generation, controller.signal);
    watchSessions(generation, controller.signal);
  }

  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token').value.trim();
    $('token').value = '';
    restart();
  });
  $('forget').addEventListener('click', () => {
    token = '';
    $('token').value = '';
    restart();
  });
  let typing = 0;
  $('prefix').addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { prefix = $('prefix').value; restart(); }, 250);
  });
  $('prefix-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    clearTimeout(typing);
    prefix = $('prefix').value;
    restart();
  });
  $('session-filter').addEventListener('input', () => { sessionFilter = $('session-filter').value.trim(); renderSessions(); });
  $('session-filter-form').addEventListener('submit', (ev) => { ev.preventDefault(); });
  $('destroy-cancel').addEventListener('click', () => { destroying = ''; $('destroy-dialog').close(); });
  $('destroy-confirm').addEventListener('click', () => {
    const id = destroying;
    destroying = '';
    $('destroy-dialog').close();
    if (id) destroy(id);
  });
  // The time columns ("held for", waiting, time left, last renewal).
  setInterval(() => { renderLocks(); renderSessions(); }, 1000);
  restart();
})();
