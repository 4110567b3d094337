// The airlock rooms page. Everything the server returns is put on the page as text
// (textContent, text nodes, attribute values), never parsed as markup.
'use strict';

(function () {
  const MAX_LOG = 200; // entries kept in the call log list
  // STREAM_RETRY_MS is how long the page waits before it opens the event stream again after
  // the server refused it (too many streams, or the daemon was not back yet).
  const STREAM_RETRY_MS = 5000;
  const state = { roomId: '', room: null, logCount: 0, loggedOut: false };
  const CSRF_KEY = 'airlock-csrf';

  // csrf is the session's CSRF token, which every API request carries. The login's redirect
  // hands it over in the fragment; it is kept in localStorage, which is this origin's alone
  // (port included), unlike the session cookie, which the browser sends to every port of
  // this host. Read on every request, so that a login in another tab is followed.
  function csrf() {
    return localStorage.getItem(CSRF_KEY) || '';
  }

  // el builds an element; string children become text nodes.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k in e && typeof v !== 'string') e[k] = v;
      else e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c !== undefined && c !== null) e.append(c);
    }
    return e;
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }

  function short(id) {
    return typeof id === 'string' && id.length > 12 ? id.slice(0, 12) + '…' : String(id || '');
  }

  function errText(err) {
    if (err && typeof err === 'object' && err.code) return err.code + ': ' + (err.message || '');
    return 'network: ' + String(err && err.message ? err.message : err);
  }

  function pretty(v) {
    return v === undefined ? '' : JSON.stringify(v, null, 2);
  }

  async function api(method, path, body) {
    const opts = { method, headers: {}, credentials: 'same-origin', cache: 'no-store' };
    opts.headers['X-Airlock-CSRF'] = csrf();
    if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
    if (!res.ok) {
      if (res.status === 401 && data && data.error) loggedOut(data.error);
      if (data && data.error) throw data.error;
      throw { code: 'http_' + res.status, message: res.statusText };
    }
    return data;
  }

  function banner(text) {
    const b = document.getElementById('banner');
    b.textContent = text || '';
    b.hidden = !text;
  }

  // loggedOut tells the operator that this page's login has ended, and what to do: a daemon
  // restart ends every login (they live in its memory), as do SessionTTL and newer logins
  // beyond MaxSessions. Nothing on the page works until a new login link is opened.
  function loggedOut(err) {
    state.loggedOut = true;
    const status = document.getElementById('status');
    status.textContent = 'logged out';
    status.className = 'status down';
    banner(errText(err) + ' — open a new login link from `airlock room open-ui`.');
  }

  // refreshAll reloads every panel the event stream keeps current.
  function refreshAll() {
    loadRooms();
    if (state.roomId) selectRoom(state.roomId);
    loadApprovals();
    loadRemembered();
  }

  // Rooms.

  async function loadRooms() {
    const list = document.getElementById('room-list');
    let rooms;
    try {
      rooms = await api('GET', '/api/rooms');
    } catch (err) {
      clear(list);
      list.append(el('li', { class: 'error', text: errText(err) }));
      return;
    }
    clear(list);
    if (rooms.length === 0) list.append(el('li', { class: 'muted', text: 'This host is in no room.' }));
    for (const r of rooms) {
      const b = el('button', { type: 'button', 'data-room': r.id, onclick: () => selectRoom(r.id) },
        el('span', { class: 'count', text: String(r.members) }), r.title || r.id);
      if (r.id === state.roomId) b.classList.add('selected');
      list.append(el('li', {}, b));
    }
    if (!state.roomId && rooms.length > 0) selectRoom(rooms[0].id);
  }

  async function selectRoom(id) {
    state.roomId = id;
    for (const b of document.querySelectorAll('#room-list button')) {
      b.classList.toggle('selected', b.getAttribute('data-room') === id);
    }
    const box = document.getElementById('room');
    let d;
    try {
      d = await api('GET', '/api/rooms/' + encodeURIComponent(id));
    } catch (err) {
      clear(box);
      box.append(el('p', { class: 'error', text: errText(err) }));
      return;
    }
    if (state.roomId !== id) return;
    state.room = d;
    renderRoom(box, d);
  }

  function renderRoom(box, d) {
    clear(box);
    box.append(el('h3', { 'data-room-title': '', text: d.title || d.id }),
      el('p', { class: 'muted' }, 'room ', el('code', { text: d.id }), ' · owner ',
        el('code', { title: d.owner, text: short(d.owner) })));

    box.append(el('h4', { text: 'Members' }));
    const members = el('tbody');
    for (const m of d.members) {
      members.append(el('tr', {},
        el('td', {}, el('code', { title: m.hostId, text: short(m.hostId) }), m.self ? el('span', { class: 'tag on', text: 'this host' }) : null),
        el('td', { text: m.name || '' }),
        el('td', {}, el('span', { class: m.present ? 'tag on' : 'tag', text: m.present ? 'present' : 'away' }))));
    }
    box.append(el('table', { class: 'members' },
      el('thead', {}, el('tr', {}, el('th', { text: 'Host' }), el('th', { text: 'Name' }), el('th', { text: 'Presence' }))),
      members));

    const own = d.capabilities.filter((c) => c.providerSelf);
    box.append(el('h4', { text: 'Publications of this host' }));
    if (own.length === 0) {
      box.append(el('p', { class: 'muted', text: 'None.' }));
    } else {
      const rows = el('tbody');
      for (const c of own) {
        rows.append(el('tr', {},
          el('td', {}, el('code', { text: c.capabilityId })),
          el('td', { text: c.actions.map((a) => a.name + (a.approveEach ? ' (approve each)' : '')).join(', ') || '—' }),
          el('td', { text: c.observe ? 'observe' : '' })));
      }
      box.append(el('table', { class: 'publications' },
        el('thead', {}, el('tr', {}, el('th', { text: 'Capability' }), el('th', { text: 'Actions' }), el('th', { text: '' }))),
        rows));
    }

    box.append(el('h4', { text: 'Capabilities' }));
    if (d.capabilities.length === 0) box.append(el('p', { class: 'muted', text: 'Nothing is published in this room.' }));
    const caps = el('div', { class: 'caps' });
    for (const c of d.capabilities) caps.append(renderCapability(d, c));
    box.append(caps);
  }

  function renderCapability(d, c) {
    const card = el('div', { class: c.available ? 'cap' : 'cap unavailable', 'data-capability': c.capabilityId, 'data-provider': c.provider });
    // A capability a call cannot reach now (its provider is away, this host lost the bus, its
    // own adapter is not ready, or its last calls failed) stays listed, marked with the reason.
    const reasons = {
      bus_disconnected: 'this host has lost the bus',
      provider_absent: 'its provider is not present in the room',
      adapter_not_ready: 'its adapter on this host is not ready',
      calls_unavailable: 'its last calls on this host all failed unavailable (calls still go through)',
    };
    card.append(el('div', { class: 'head' },
      el('strong', { text: c.title || c.capabilityId }),
      el('span', {}, el('code', { text: c.capabilityId }))),
    el('div', { class: 'muted' }, 'by ', el('code', { title: c.provider, text: short(c.provider) }),
      c.providerSelf ? el('span', { class: 'tag on', text: 'this host' }) : null,
      c.available ? null : el('span', { class: 'tag warn', 'data-unavailable': c.unavailableReason || '',
        title: reasons[c.unavailableReason] || '', text: 'unavailable: ' + (c.unavailableReason || 'unknown') })));
    if (c.observe) {
      const out = el('pre', { class: 'observation', text: '…' });
      const refresh = el('button', { type: 'button', class: 'small', text: 'refresh', title: 'Observe again', onclick: () => observe(d, c, out) });
      card.append(el('div', { class: 'obs' }, el('span', { class: 'muted', text: 'Observation ' }), refresh, out));
      observe(d, c, out);
    }
    for (const a of c.actions) card.append(renderAction(d, c, a));
    return card;
  }

  async function observe(d, c, out) {
    try {
      const res = await api('POST', '/api/observe', { room: d.id, provider: c.provider, capability: c.capabilityId });
      out.className = 'observation';
      out.textContent = pretty(res.result);
    } catch (err) {
      out.className = 'observation error';
      out.textContent = errText(err);
    }
  }

  // renderAction builds the action's form from the server's field list, or a JSON textarea
  // when the schema is one the page cannot render field by field.
  function renderAction(d, c, a) {
    const form = el('form', { class: 'action', 'data-action': a.name, novalidate: false });
    form.append(el('h4', {}, a.title || a.name, ' ', el('code', { class: 'muted', text: a.name }),
      a.approveEach ? el('span', { class: 'tag warn', text: 'approve each' }) : null));
    const getters = [];
    if (a.form && !a.form.raw) {
      for (const f of a.form.fields) getters.push(renderField(form, f));
    } else {
      const ta = el('textarea', { name: '__args', spellcheck: 'false', 'aria-label': 'args (JSON object)' });
      ta.value = '{}';
      form.append(el('label', {}, el('span', { text: 'args (JSON)' })), ta);
      if (a.input) form.append(el('pre', { class: 'schema', text: pretty(a.input) }));
      getters.push((args) => {
        let v;
        try {
          v = JSON.parse(ta.value);
        } catch (e) {
          throw { code: 'invalid_args', message: 'args are not JSON' };
        }
        if (v === null || typeof v !== 'object' || Array.isArray(v)) throw { code: 'invalid_args', message: 'args must be a JSON object' };
        Object.assign(args, v);
      });
    }
    const submit = el('button', { type: 'submit', text: 'Run' });
    const out = el('pre', { class: 'result', hidden: true });
    form.append(el('div', {}, submit), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const args = {};
      try {
        for (const g of getters) g(args);
      } catch (err) {
        out.hidden = false;
        out.className = 'result error';
        out.textContent = errText(err);
        return;
      }
      submit.disabled = true;
      out.hidden = false;
      out.className = 'result';
      out.textContent = a.approveEach ? 'waiting for the provider’s approval…' : 'running…';
      try {
        const res = await api('POST', '/api/invoke', { room: d.id, provider: c.provider, capability: c.capabilityId, action: a.name, args });
        out.textContent = pretty(res.result);
        const obs = form.parentElement && form.parentElement.querySelector('pre.observation');
        if (obs) observe(d, c, obs);
      } catch (err) {
        out.className = 'result error';
        out.textContent = errText(err);
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  // renderField adds one input and returns the function that puts its value into args.
  function renderField(form, f) {
    const label = f.title || f.name;
    let input;
    switch (f.kind) {
      case 'enum':
        input = el('select', { name: f.name, required: f.required });
        if (!f.required) input.append(el('option', { value: '', text: '—' }));
        for (const v of f.enum) input.append(el('option', { value: v, text: v }));
        break;
      case 'boolean':
        input = el('input', { type: 'checkbox', name: f.name });
        break;
      case 'number':
      case 'integer':
        input = el('input', { type: 'number', name: f.name, required: f.required, step: f.kind === 'integer' ? '1' : 'any' });
        if (f.minimum !== undefined) input.min = String(f.minimum);
        if (f.maximum !== undefined) input.max = String(f.maximum);
        break;
      default:
        input = el('input', { type: 'text', name: f.name, required: f.required, spellcheck: 'false' });
        if (f.maxLength !== undefined) input.maxLength = f.maxLength;
        if (f.minLength !== undefined) input.minLength = f.minLength;
    }
    form.append(el('label', { title: f.description || '' },
      el('span', { text: label + (f.required ? ' *' : '') }), input));
    return (args) => {
      if (f.kind === 'boolean') {
        args[f.name] = input.checked;
        return;
      }
      const v = input.value;
      if (v === '') {
        if (f.required && f.kind !== 'string') throw { code: 'invalid_args', message: label + ' is required' };
        if (!f.required) return;
      }
      if (f.kind === 'number' || f.kind === 'integer') {
        const n = Number(v);
        if (!Number.isFinite(n) || (f.kind === 'integer' && !Number.isInteger(n))) throw { code: 'invalid_args', message: label + ' is not a number' };
        args[f.name] = n;
        return;
      }
      args[f.name] = v;
    };
  }

  // Approvals.

  // focusedControl describes the control of the approval list that has the keyboard focus, so
  // that a rebuilt list can give it back: which request, its position, which control, and the
  // caret of a text field.
  function focusedControl(list) {
    const active = document.activeElement;
    if (!active || !list.contains(active)) return null;
    const li = active.closest('li[data-approval]');
    let sel = null;
    if (active.name) sel = 'input[name="' + active.name + '"]';
    else if (active.classList.contains('approve')) sel = 'button.approve';
    else if (active.classList.contains('deny')) sel = 'button.deny';
    return { id: li ? li.dataset.approval : '', index: li ? [...list.children].indexOf(li) : 0, sel,
      start: active.selectionStart, end: active.selectionEnd };
  }

  // restoreFocus gives the focus back after the list was rebuilt: to the same control of the
  // same request, or, when that request is gone (decided, expired), to the Approve button of
  // the one now in its place, else to the panel's heading, so that a keyboard user goes on
  // from where they were rather than from the top of the page.
  function restoreFocus(list, f) {
    if (!f) return;
    let target = null;
    const same = f.id ? list.querySelector('li[data-approval="' + CSS.escape(f.id) + '"]') : null;
    if (same && f.sel) target = same.querySelector(f.sel);
    if (!target && !same) {
      const items = list.querySelectorAll('li[data-approval]');
      const next = items[Math.min(f.index, items.length - 1)];
      if (next) target = next.querySelector('button.approve');
    }
    if (!target) target = document.querySelector('#approvals h2');
    target.focus();
    if (target.setSelectionRange && typeof f.start === 'number') target.setSelectionRange(f.start, f.end);
  }

  // loadApprovals rebuilds the list; refocus, when set, is the focus to give back (a decision
  // disabled the button that had it, which took the focus away).
  async function loadApprovals(refocus) {
    const list = document.getElementById('approval-list');
    let items;
    try {
      items = await api('GET', '/api/approvals');
    } catch (err) {
      clear(list);
      list.append(el('li', { class: 'error', text: errText(err) }));
      return;
    }
    // A list rebuilt while the operator fills in an entry keeps what they chose, and the focus.
    const focus = focusedControl(list) || refocus || null;
    const kept = {};
    for (const li of list.querySelectorAll('li[data-approval]')) {
      const r = li.querySelector('input[name="remember"]');
      const pt = li.querySelector('input[name="pattern"]');
      const aa = li.querySelector('input[name="anyArgs"]');
      kept[li.dataset.approval] = { remember: !!(r && r.checked), pattern: pt ? pt.value : '', anyArgs: !!(aa && aa.checked) };
    }
    clear(list);
    if (items.length === 0) list.append(el('li', { class: 'muted', text: 'Nothing waits for you.' }));
    for (const p of items) {
      const was = kept[p.id] || { remember: false, pattern: '', anyArgs: false };
      const out = el('div', { class: 'error', hidden: true });
      const remember = el('input', { type: 'checkbox', name: 'remember' });
      remember.checked = was.remember;
      // An fs call is remembered by its path or a glob; a capability action by its exact
      // arguments or any arguments.
      const pattern = p.path !== undefined && p.path !== ''
        ? el('input', { type: 'text', name: 'pattern', placeholder: 'path glob (default: this path)', size: 24 })
        : null;
      const anyArgs = pattern ? null : el('input', { type: 'checkbox', name: 'anyArgs' });
      if (pattern) pattern.value = was.pattern;
      if (anyArgs) anyArgs.checked = was.anyArgs;
      const decide = async (approve, btns) => {
        const focus = focusedControl(list);
        btns.forEach((b) => { b.disabled = true; });
        const body = { id: p.id, approve };
        if (approve && remember.checked) {
          body.remember = true;
          if (pattern && pattern.value.trim() !== '') body.pattern = pattern.value.trim();
          if (anyArgs && anyArgs.checked) body.anyArgs = true;
        }
        try {
          await api('POST', '/api/decide', body);
          loadApprovals(focus);
          loadRemembered();
        } catch (err) {
          out.hidden = false;
          out.textContent = errText(err);
          btns.forEach((b) => { b.disabled = false; });
          if (focus) restoreFocus(list, focus);
        }
      };
      const yes = el('button', { type: 'button', class: 'approve', text: 'Approve' });
      const no = el('button', { type: 'button', class: 'deny', text: 'Deny' });
      yes.addEventListener('click', () => decide(true, [yes, no]));
      no.addEventListener('click', () => decide(false, [yes, no]));
      const what = p.target || (p.capability + '.' + p.action);
      const where = p.path ? el('span', {}, ' on ', el('code', { class: 'path', text: p.path }))
        : p.room ? el('span', {}, ' in ', el('code', { text: p.room })) : null;
      const who = p.who ? el('span', { class: 'who', text: p.who })
        : el('span', {}, 'from ', el('code', { title: p.caller, text: short(p.caller) }));
      list.append(el('li', { 'data-approval': p.id, 'data-kind': p.kind || 'call' },
        el('div', {}, el('code', { class: 'target', text: what }), where),
        el('div', { class: 'muted' }, who, ' · until ', new Date(p.expires).toLocaleTimeString()),
        p.reason ? el('div', { class: 'muted reason', text: 'why: ' + p.reason }) : null,
        p.args !== undefined ? el('pre', { class: 'args', text: p.argsTruncated ? 'first bytes: ' + p.args : pretty(p.args) }) : null,
        p.detail !== undefined ? el('pre', { class: 'detail', text: pretty(p.detail) }) : null,
        p.rememberable ? el('div', { class: 'remember' },
          el('label', {}, remember, ' remember for this ' + (p.room && !p.path ? 'membership' : 'session')),
          pattern, anyArgs ? el('label', {}, anyArgs, ' any arguments') : null) : null,
        el('div', { class: 'buttons' }, yes, no), out));
    }
    restoreFocus(list, focus);
  }

  async function loadRemembered() {
    const list = document.getElementById('memory-list');
    let items;
    try {
      items = await api('GET', '/api/remembered');
    } catch (err) {
      clear(list);
      list.append(el('li', { class: 'error', text: errText(err) }));
      return;
    }
    clear(list);
    if (items.length === 0) list.append(el('li', { class: 'muted', text: 'No remembered approvals.' }));
    for (const m of items) {
      const out = el('div', { class: 'error', hidden: true });
      const forget = el('button', { type: 'button', class: 'small forget', text: 'Forget' });
      forget.addEventListener('click', async () => {
        forget.disabled = true;
        try {
          await api('POST', '/api/forget', { id: m.id });
          loadRemembered();
        } catch (err) {
          out.hidden = false;
          out.textContent = errText(err);
          forget.disabled = false;
        }
      });
      list.append(el('li', { 'data-memory': m.id },
        el('div', {}, el('code', { class: 'target', text: m.target }), ' ', el('code', { class: 'match', text: m.match }), ' ', forget),
        el('div', { class: 'muted' }, m.scope + ' · used ' + m.uses + '×'), out));
    }
  }

  // The live call log.

  function addLogEntry(ev) {
    const list = document.getElementById('log-list');
    const ok = ev.outcome === 'ok' || ev.outcome === 'approved' || ev.outcome === 'pending' ||
      ev.outcome === 'remembered' || ev.outcome === 'forgotten';
    const what = ev.target || (ev.capability + (ev.operation ? ' ' + ev.operation : '') + (ev.action ? ' ' + ev.action : ''));
    const li = el('li', { 'data-kind': ev.kind, 'data-outcome': ev.outcome },
      el('span', { class: 'muted', text: new Date(ev.time).toLocaleTimeString() }),
      el('span', {}, el('code', { text: what }), ev.room ? ' in ' : null, ev.room ? el('code', { text: ev.room }) : null),
      el('span', { class: 'outcome ' + (ok ? 'ok' : 'bad'), text: ev.outcome }),
      el('span', { class: 'muted' }, ev.kind === 'approval' ? 'approval' : 'call'),
      ev.who ? el('span', { class: 'muted', text: ev.who })
        : el('span', { class: 'muted' }, 'from ', el('code', { title: ev.caller, text: short(ev.caller) }), ' to ',
          el('code', { title: ev.provider, text: short(ev.provider) })),
      el('span', { class: 'muted', text: ev.kind === 'call' ? ev.durationMs + ' ms' : '' }));
    list.prepend(li);
    state.logCount++;
    while (list.children.length > MAX_LOG) list.removeChild(list.lastChild);
  }

  // connectEvents opens the event stream; resync says that events may have been missed
  // since the panels were loaded.
  function connectEvents(resync) {
    const status = document.getElementById('status');
    // An EventSource sends no headers: the token goes in the query.
    const es = new EventSource('/api/events?csrf=' + encodeURIComponent(csrf()));
    let missed = !!resync;
    es.addEventListener('open', () => {
      status.textContent = 'live';
      status.className = 'status live';
      // What happened while the stream was down came as no event: an approval that now
      // waits, or one that was decided or expired, would otherwise stay unseen or stale.
      if (missed) refreshAll();
      missed = false;
    });
    es.addEventListener('error', () => {
      missed = true;
      if (state.loggedOut) {
        es.close();
        return;
      }
      status.textContent = 'reconnecting…';
      status.className = 'status down';
      if (es.readyState !== EventSource.CLOSED) return; // the browser tries again by itself
      // The server answered, but not with a stream, and the browser gives up: a login that
      // has ended (api shows it), or too many streams. Ask which, and retry unless it was
      // the login.
      es.close();
      const retry = () => {
        if (!state.loggedOut) setTimeout(() => connectEvents(true), STREAM_RETRY_MS);
      };
      api('GET', '/api/session').then(retry, retry);
    });
    const onEvent = (msg) => {
      let ev;
      try {
        ev = JSON.parse(msg.data);
      } catch (e) {
        return;
      }
      addLogEntry(ev);
      if (ev.kind === 'approval') {
        loadApprovals();
        loadRemembered();
      }
    };
    es.addEventListener('call', onEvent);
    es.addEventListener('approval', onEvent);
  }

  // The history view: pages of the audit journal, newest first.

  function historyWho(e) {
    if (e.session) return e.session + (e.generation ? '/' + e.generation : '');
    if (e.room) return e.room + (e.host ? ' ' + short(e.host) : '');
    return e.mcpClient || (e.pid ? 'pid ' + e.pid : '');
  }

  function historyTarget(e) {
    return e.path || [e.capability, e.action].filter(Boolean).join('.') || e.adapter || e.room || '';
  }

  function addHistoryRow(body, e) {
    const bad = e.outcome && e.outcome !== 'ok';
    body.append(el('tr', { 'data-seq': e.seq, 'data-kind': e.kind, 'data-op': e.op, 'data-outcome': e.outcome || '' },
      el('td', { class: 'muted', text: new Date(e.time).toLocaleString() }),
      el('td', { text: String(e.seq) }),
      el('td', { text: e.kind + (e.ref ? ' of ' + e.ref : '') }),
      el('td', { text: e.door }),
      el('td', { title: e.exe || '', text: historyWho(e) }),
      el('td', {}, el('code', { text: e.op })),
      el('td', {}, el('code', { text: historyTarget(e) })),
      el('td', { class: e.outcome ? (bad ? 'bad' : 'ok') : '', text: e.outcome || '' }),
      el('td', { class: 'muted', text: e.durationUs ? (e.durationUs / 1000).toFixed(1) + ' ms' : '' })));
  }

  async function loadHistory(before) {
    const form = document.getElementById('history-form');
    const body = document.querySelector('#history-table tbody');
    const older = document.getElementById('history-older');
    const errBox = document.getElementById('history-error');
    const q = new URLSearchParams();
    for (const name of ['session', 'room', 'door']) {
      const v = form.elements[name].value.trim();
      if (v) q.set(name, v);
    }
    if (before) q.set('before', String(before));
    try {
      const page = await api('GET', '/api/history?' + q.toString());
      if (!before) clear(body);
      for (const e of page.entries) addHistoryRow(body, e);
      errBox.hidden = true;
      older.hidden = !page.next;
      older.dataset.before = page.next ? String(page.next) : '';
    } catch (err) {
      errBox.textContent = errText(err);
      errBox.hidden = false;
    }
  }

  async function start() {
    const m = /^#csrf=([A-Za-z0-9_-]+)$/.exec(location.hash);
    if (m) {
      localStorage.setItem(CSRF_KEY, m[1]);
      history.replaceState(null, '', '/');
    }
    try {
      await api('GET', '/api/session');
    } catch (err) {
      banner(errText(err) + ' — open a new login link from `airlock room open-ui`.');
      return;
    }
    document.getElementById('refresh').addEventListener('click', refreshAll);
    document.getElementById('history-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      loadHistory(0);
    });
    document.getElementById('history-older').addEventListener('click', (ev) => {
      loadHistory(Number(ev.target.dataset.before));
    });
    connectEvents();
    loadRooms();
    loadApprovals();
    loadHistory(0);
    loadRemembered();
  }

  start();
})();
