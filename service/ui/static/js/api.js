// The public /v1 API, called with the API key this tab holds (sessionStorage), exactly as any client would.

const KEY = "ntklab.apiKey";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export function hasKey() {
  return sessionStorage.getItem(KEY) !== null;
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
}

let pendingKey = null;

/** Ask once for a key (one dialog however many requests were refused at the same time). */
function askForKey(reason) {
  if (pendingKey) return pendingKey;
  const dialog = document.getElementById("key-dialog");
  document.getElementById("key-reason").textContent = reason;
  pendingKey = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const key = document.getElementById("key-input").value.trim();
      if (key) sessionStorage.setItem(KEY, key);
      document.getElementById("key-input").value = "";
      pendingKey = null;
      resolve();
    }, { once: true });
    dialog.showModal();
  });
  return pendingKey;
}

function headers(json) {
  const out = { Accept: "application/json, application/problem+json" };
  const key = sessionStorage.getItem(KEY);
  if (key) out["X-API-Key"] = key;
  if (json) out["Content-Type"] = "application/json";
  return out;
}

/** fetch(path) with the key; a 401 asks for a key and retries; any other error status throws ApiError. */
export async function request(path, { method = "GET", body } = {}) {
  const json = body !== undefined;
  const response = await fetch(path, { method, headers: headers(json), body: json ? JSON.stringify(body) : undefined });
  if (response.status === 401) {
    const problem = await response.json().catch(() => null);
    await askForKey(`${problem?.detail || "This server needs an API key."} It is kept for this tab's session only.`);
    return request(path, { method, body });
  }
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
  return response;
}

export async function getJson(path) {
  return (await request(path)).json();
}

export async function send(method, path, body) {
  const response = await request(path, { method, body });
  return response.status === 204 ? null : response.json();
}

/** The bytes of an artifact, as an ArrayBuffer. */
export async function getBytes(path) {
  return (await request(path)).arrayBuffer();
}

/** Download a URL through the API (the key goes in a header, so a plain link would not do). */
export async function download(path, fileName) {
  const blob = await (await request(path)).blob();
  const url = URL.createObjectURL(blob);
  const link = Object.assign(document.createElement("a"), { href: url, download: fileName });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const item of [value].flat()) if (item !== null && item !== undefined && item !== "") search.append(name, item);
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
