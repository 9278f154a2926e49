// What a notebook stores as each graph view's front-end: anywidget keeps a copy of `_esm` in every view's
// state, so the four files (graph_layout.js, graph_view.js, memory_timeline.js, graph_view_dom.js, 59 KB)
// travel deflated and base64-encoded (about 26 KB), and are inflated in the browser and imported from a blob
// URL, as anywidget imports `_esm` itself. graph_view.esm() fills in CODE; graph_view.esm_source() is the module unpacked.
const CODE = "@CODE@";
let loaded = null;

async function load() {
  const bytes = Uint8Array.from(atob(CODE), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  const url = URL.createObjectURL(new Blob([await new Response(stream).text()], { type: "text/javascript" }));
  try {
    return await import(url);
  } finally {
    URL.revokeObjectURL(url);
  }
}

export default {
  async render(context) {
    loaded = loaded || load();
    return (await loaded).default.render(context);
  },
};
