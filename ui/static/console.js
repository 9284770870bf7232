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

  // sleep waits ms, or less if signal aborts.
  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  // api GETs a path of the API and returns its JSON body, or throws an Error carrying the
  // API's error code and message.
  async function api(path, signal) {
    const headers = { Accept: 'application/json' };
    if (token) headers['X-Raftlock-Token'] = token;
    const r = await fetch(path, { headers, signal, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' });
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const detail = body && body.error ? body.error : { code: 'http_' + r.status, message: r.statusText };
      const err = new Error(detail.code + ': ' + detail.message);
      err.status = r.status;
      err.code = detail.code;
      throw err;
    }
    return body;
  }

  // explain turns an API error into a sentence for this page.
  function explain(err) {
    if (err.status === 401) return token ? 'The token is unknown to the cluster.' : 'This cluster runs with ACLs: enter a token above.';
    return err.message;
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

  // watchLocks keeps the lock table live: through the prefix watch (GET /v1/locks?prefix=P
  // &index=N&wait=D) where the node has it, else by reading the list twice a second.
  async function watchLocks(gen, signal) {
    let index = 0;
    let watch = true;
    while (gen === generation) {
      try {
        const list = '/v1/locks?prefix=' + encodeURIComponent(prefix);
        if (watch) {
          const b = await api(list + '&index=' + index + (index ? '&wait=60s' : ''), signal);
          if (gen !== generation) return;
          if (typeof b.reset !== 'boolean') {
            watch = false; // a node without prefix watches answered the plain list
            mode = 'poll';
            replaceLocks(b.locks);
          } else {
            mode = 'watch';
            if (b.reset) replaceLocks(b.locks); else applyChanges(b.locks);
            index = b.index;
          }
        } else {
          const b = await api(list, signal);
          if (gen !== generation) return;
          replaceLocks(b.locks);
        }
        lastUpdate = Date.now();
        showError('locks-error', null);
        renderLocks();
        if (!watch) await sleep(500, signal);
      } catch (err) {
        if (signal.aborted || gen !== generation) return;
        locks.clear();
        grants.clear();
        renderLocks();
        showError('locks-error', err);
        index = 0;
        await sleep(1000, signal);
      }
    }
  }

  // pollOthers reads the cluster and the sessions every two seconds: neither has a blocking
  // query.
  async function pollOthers(gen, signal) {
    while (gen === generation) {
      await Promise.all([loadCluster(signal), loadSessions(signal)]);
      if (gen !== generation) return;
      renderLocks();
      await sleep(2000, signal);
    }
  }

  async function loadCluster(signal) {
    try {
      const h = await api('/v1/health', signal);
      $('node').textContent = 'node ' + h.id + ' · version ' + h.version;
    } catch (err) {
      $('node').textContent = '';
    }
    try {
      renderCluster(await api('/v1/cluster', signal));
      showError('cluster-error', null);
    } catch (err) {
      if (signal.aborted) return;
      renderCluster(null);
      if (err.status === 403) err.message = 'This token may not read the cluster: it needs operator:read.';
      showError('cluster-error', err);
    }
  }

  async function loadSessions(signal) {
    try {
      const b = await api('/v1/sessions', signal);
      sessions.clear();
      for (const s of b.sessions) sessions.set(s.id, s);
      showError('sessions-error', null);
    } catch (err) {
      if (signal.aborted) return;
      sessions.clear();
      showError('sessions-error', err);
    }
    renderSessions();
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
  function holderText(sessionID) {
    if (!sessionID) return 'hidden (another token\u2019s session)';
    const s = sessions.get(sessionID);
    const id = sessionID.slice(0, 8) + '\u2026';
    return s && s.name ? s.name + ' (' + id + ')' : id;
  }

  function renderLocks() {
    const now = Date.now();
    const rows = [...locks.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).map((l) => {
      const holders = l.holders && l.holders.length ? l.holders : (l.held ? [{ session: l.session, token: l.token, value: l.value }] : []);
      const holderCell = holders.length
        ? holders.map((h) => el('div', holderText(h.session) + (h.mode ? ' · ' + h.mode : ''), { class: 'holder' }))
        : 'free';
      const tokenCell = holders.length ? holders.map((h) => el('div', h.token, { class: 'holder' })) : '—';
      const valueCell = holders.length ? holders.map((h) => el('div', h.value, { class: 'holder' })) : '';
      const holderSession = l.held && l.session ? sessions.get(l.session) : undefined;
      const g = grants.get(l.name);
      const age = g ? (g.exact ? '' : '\u2265 ') + ago(now - g.since) : '—';
      const limit = l.limit ? ' (limit ' + l.limit + ')' : '';
      return el('tr', [
        el('td', l.name + limit, { class: 'name' }),
        el('td', holderCell),
        el('td', tokenCell, { class: 'num' }),
        el('td', valueCell, { class: 'value' }),
        el('td', l.waiters, { class: 'num' }),
        el('td', holderSession ? holderSession.lock_delay : '—'),
        el('td', age, { class: 'num', title: g && !g.exact ? 'held at least this long: since this page loaded the list' : '' }),
      ], { 'data-lock': l.name });
    });
    replaceRows($('locks'), rows);
    $('locks-empty').hidden = rows.length > 0;
    const how = mode === 'watch' ? 'live (prefix watch)' : mode === 'poll' ? 'read twice a second' : 'connecting';
    $('status').textContent = how + (lastUpdate ? ' · updated ' + new Date(lastUpdate).toLocaleTimeString() : '') + (token ? ' · token in use' : '');
  }

  function renderSessions() {
    const rows = [...sessions.values()].sort((a, b) => a.created_index - b.created_index).map((s) => el('tr', [
      el('td', s.name || '—', { class: 'name' }),
      el('td', s.id, { class: 'value' }),
      el('td', s.ttl),
      el('td', s.lock_delay),
      el('td', s.locks.length ? s.locks.map((n) => el('div', n, { class: 'holder' })) : '—', { class: 'value' }),
    ], { 'data-session': s.id }));
    replaceRows($('sessions'), rows);
    $('sessions-empty').hidden = rows.length > 0;
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
    renderLocks();
    renderSessions();
    watchLocks(generation, controller.signal);
    pollOthers(generation, controller.signal);
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
  setInterval(renderLocks, 1000); // the "held for" column
  restart();
})();
