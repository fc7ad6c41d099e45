// The memory calculator: looks up scripts/calculator_data.py's estimates (window.LONGCTX_ESTIMATES) for the chosen
// model, length, levers and card: the peak per GPU and the step's time on that card. No estimate is computed here; the page shows the file's numbers as they are.
(function () {
  const data = window.LONGCTX_ESTIMATES;
  const $ = (id) => document.getElementById(id);
  const gib = (x) => x.toFixed(2);
  const tokens = (n) => (n >= 1 << 20 ? n / (1 << 20) + "M" : n / 1024 + "k");

  function fill(select, options, value) {
    for (const [label, v] of options) select.add(new Option(label, v));
    if (value !== undefined) select.value = value;
    select.addEventListener("change", draw);
  }

  // the estimate at the chosen settings: {peak_gib, host_gib, phase, gib: {category: GiB}} or {error}
  function lookup(model, step, length) {
    return data.estimates[model][step][data.lengths.indexOf(length)];
  }

  function draw() {
    const model = $("calc-model").value, step = +$("calc-step").value, length = +$("calc-length").value;
    const card = $("calc-card").value, capacity = data.cards[card], gpus = data.steps[step].gpus;
    const e = lookup(model, step, length);
    const body = $("calc-breakdown").tBodies[0];
    body.innerHTML = "";
    if (e.error) {
      $("calc-verdict").textContent = "Not estimated: " + e.error;
      $("calc-time").textContent = "";
    } else {
      const fits = e.peak_gib <= capacity;
      $("calc-verdict").innerHTML =
        `<strong>${gib(e.peak_gib)} GiB per GPU</strong> (peak in the ${e.phase}) on ${gpus} GPU(s): ` +
        (fits ? "fits" : `over by ${gib(e.peak_gib - capacity)} GiB`) + ` the ${card} (${gib(capacity)} GiB)` +
        (fits ? ` with ${gib(capacity - e.peak_gib)} GiB left; the allocator's cache may want ` +
          data.reserved_over_allocated.map((r) => gib(e.peak_gib * (r - 1))).join("–") +
          " GiB more (measured on an H200 without expandable_segments)" : "") +
        (e.host_gib ? `; ${gib(e.host_gib)} GiB per GPU offloaded to host memory` : "");
      $("calc-verdict").dataset.peak = e.peak_gib;
      $("calc-verdict").dataset.fits = fits;
      const seconds = e.seconds[card];
      $("calc-time").innerHTML =
        `<strong>${seconds.toFixed(seconds < 10 ? 2 : 1)} s per step</strong> on ${gpus} ${card}(s), ` +
        `${Math.round(length / seconds).toLocaleString("en")} tokens/s (the time model: attention as ` +
        `${data.attention[card]}; the linear layers' efficiency ` +
        (card.startsWith("H") ? "fitted on Hopper)" : "assumed from Hopper on this card)");
      $("calc-time").dataset.seconds = seconds;
      const largest = Math.max(...Object.values(e.gib));
      for (const [category, value] of Object.entries(e.gib)) {
        const row = body.insertRow();
        row.insertCell().textContent = category;
        row.insertCell().textContent = gib(value);
        const bar = document.createElement("div");
        bar.style.cssText = `background:#4c72b0;height:0.8em;width:${(200 * value) / largest}px`;
        row.insertCell().appendChild(bar);
      }
    }
    // the plan's answer: the first step of the ladder that fits this card at this length
    const first = data.steps.findIndex((_, s) => !lookup(model, s, length).error && lookup(model, s, length).peak_gib <= capacity);
    $("calc-cheapest").textContent =
      first < 0
        ? `Nothing in the ladder fits ${tokens(length)} tokens of ${model} on up to 8 ${card}s.`
        : `Cheapest that fits (as longctx plan --gpus 8 orders the levers): ${data.steps[first].levers.join(" + ")}.`;
  }

  fill($("calc-model"), data.models.map((m) => [m, m]), "qwen3-4b");
  fill($("calc-length"), data.lengths.map((n) => [tokens(n), n]), String(1 << 17));
  fill($("calc-step"), data.steps.map((s, i) => [s.levers.join(" + "), i]), "3");
  fill($("calc-card"), Object.keys(data.cards).map((c) => [c, c]), "H100-80GB");
  const v = data.versions;
  $("calc-about").textContent = `Estimated with torch ${v.torch}, transformers ${v.transformers}, trl ${v.trl}.`;
  draw();
})();
