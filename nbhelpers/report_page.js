// The page diagnosis.view.page() writes, filled in from its JSON (report-data) with textContent only, and its
// widgets run by graph_view's own front-end (joined before this file in the same module) with a stand-in for
// the widget model: the traits live in the page, and every interaction runs in the browser.
function fillText(id, text) { document.getElementById(id).textContent = text; }

function pageModel(state) {                  // what anywidget's model offers a render(): get, set, on, save_changes
  const listeners = new Map();
  return {
    get: (name) => state[name],
    set: (name, value) => {
      state[name] = value;
      for (const f of listeners.get(`change:${name}`) || []) f();
    },
    on: (event, f) => { if (!listeners.has(event)) listeners.set(event, []); listeners.get(event).push(f); },
    off: () => {},
    save_changes: () => {},
  };
}

function findingItem(list, f) {             // a finding, its fix as code, and what else its line causes
  const item = document.createElement("li");
  const kind = document.createElement("span");
  kind.className = "kind";
  kind.textContent = f.kind;
  const title = document.createElement("strong");
  title.textContent = ` ${f.title}`;
  item.append(kind, title);
  const lines = [["evidence", f.evidence], ["where", f.where ? `where: ${f.where}` : ""],
    ["cost", f.cost ? `cost: ${f.cost}` : ""]];
  for (const [cls, text] of lines) {
    if (!text) continue;
    const line = document.createElement("div");
    line.className = cls;
    line.textContent = text;
    item.append(line);
  }
  if (f.fix) {
    const fix = document.createElement("pre");
    fix.className = "fix";
    fix.textContent = f.fix;
    item.append(fix);
  }
  if (f.consequences && f.consequences.length) {
    const also = document.createElement("ul");
    also.className = "consequences";
    also.setAttribute("aria-label", "the same line also causes");
    f.consequences.forEach((c) => findingItem(also, c));
    item.append(also);
  }
  if (f.lesson) item.append(lessonLine(f));
  list.append(item);
}

function lessonLine(f) {                     // "taught in notebook 05 · torch.compile", a link to it in a checkout
  const line = document.createElement("div"), name = `notebook ${f.lesson}`;
  line.className = "lesson";
  line.append("taught in ");
  if (f.notebook) {
    const link = document.createElement("a");
    link.setAttribute("href", f.notebook);
    link.textContent = name;
    line.append(link);
  } else {
    line.append(name);
  }
  return line;
}

function agreementRow(body, a) {
  const row = body.insertRow();
  const cells = [a.name, a.ours.toLocaleString("en-US"), a.theirs.toLocaleString("en-US"), a.tool, a.agrees ? "yes" : "NO",
    a.shared ? `no: ${a.shared}` : "yes"];
  cells.forEach((text, k) => {
    const cell = row.insertCell();
    cell.textContent = text;
    if (k === 1 || k === 2) cell.className = "num";
    if (k === 4) cell.className = a.agrees ? "yes" : "no";
  });
}

async function fillReport() {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  fillText("title", data.title);
  document.title = data.title;
  fillText("subtitle", data.subtitle);
  fillText("error", data.error);
  data.findings.forEach((f) => findingItem(document.getElementById("findings"), f));
  const body = document.getElementById("agreements");
  data.agreements.forEach((a) => agreementRow(body, a));
  const wrong = data.agreements.filter((a) => !a.agrees).length;
  const shared = data.agreements.filter((a) => a.shared).length;
  fillText("agreement-count", data.agreements.length ? `${data.agreements.length - wrong} of ${data.agreements.length} numbers agree.`
    + (shared ? ` ${shared} of them are totals both sides add up alike, not independent measurements.` : "")
    : "No number could be checked: the step did not run.");
  for (const text of data.unchecked) {
    const item = document.createElement("li");
    item.textContent = `not checked: ${text}`;
    document.getElementById("unchecked").append(item);
  }
  const views = document.getElementById("views");
  for (const [k, state] of data.widgets.entries()) {
    const heading = document.createElement("h2");
    heading.textContent = data.captions[k];
    const el = document.createElement("div");
    el.className = "report-widget";
    views.append(heading, el);
    await render({ model: pageModel(state), el });
  }
  document.body.dataset.ready = "true";        // for the browser test: every widget has rendered
}

fillReport();
