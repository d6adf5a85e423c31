() => {
  // A refusal is drawn on the field it is about, which may be a screen above the Generate button that was just
  // pressed; copy its words into the tab's alert beside the button (clicking the alert shows the field).
  const fieldErrors = (tab) => [...tab.querySelectorAll(".validation-error")]
    .filter((e) => e.textContent.trim());
  let queued = false;
  const refresh = () => {
    queued = false;
    document.querySelectorAll(".job-alert").forEach((alert) => {
      const tab = alert.closest(".tabitem") || document.body;
      const texts = [...new Set(fieldErrors(tab).map((e) => e.textContent.trim()))];
      const text = texts.join("\n");
      if ((alert.dataset.text || "") === text) return;
      alert.dataset.text = text;
      alert.textContent = text;
      alert.hidden = !text;
      if (text) {
        // the alert pushed the buttons down: keep both the message and the button just pressed on screen
        const buttons = tab.querySelector(".job-buttons");
        if (buttons) buttons.scrollIntoView({ block: "nearest" });
        alert.scrollIntoView({ block: "nearest" });
      }
    });
  };
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(refresh); }
  }).observe(document.body, { subtree: true, childList: true, characterData: true });
  document.addEventListener("click", (event) => {
    const alert = event.target.closest && event.target.closest(".job-alert");
    if (!alert) return;
    const tab = alert.closest(".tabitem") || document.body;
    const field = fieldErrors(tab)[0];
    const block = field && field.closest(".block");
    if (block) block.scrollIntoView({ block: "center", behavior: "smooth" });
  });
}
