// Checks deploy/kubernetes's rendered objects, as deploy/check.sh calls it:
//   node validate.mjs NODE_MODULES OUT_DIR OVERLAY=FILE... secrets=FILE
// Each object against its API's schema (kubernetes-models; ServiceMonitor and
// PrometheusRule from @kubernetes-models/prometheus-operator), strictly: those
// schemas let unknown fields pass, so every object is also type-checked, as an
// object literal, against the same packages' TypeScript interfaces, whose
// excess-property check refuses a field the API does not have at any depth
// (a misspelt optional field would otherwise be silently dropped by the API
// server). Then against
// what the server needs: the properties below are the ones whose loss would
// break serving, draining or security without any schema noticing. Writes
// each overlay's server.json (its ConfigMap) and alert rules (its
// PrometheusRule's groups) to OUT_DIR as OVERLAY-server.json and
// OVERLAY-rules.yaml, for the server's --check-config and for promtool.
// Prints one line per finding; exits 1 if any.
import { existsSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, outDir, ...inputs] = process.argv.slice(2);
if (!modules || !outDir || inputs.length === 0) {
  console.error("usage: node validate.mjs NODE_MODULES OUT_DIR NAME=RENDERED.yaml...");
  process.exit(2);
}
// By file path: the packages are ESM with export maps, installed outside
// this directory (build/tools), where bare imports would not find them.
const load = (path) => import(pathToFileURL(join(modules, path)).href);
const YAML = await load("yaml/dist/index.js");
const tsModule = await load("typescript/lib/typescript.js");

const SCHEMAS = {
  "v1/Namespace": "kubernetes-models/v1/Namespace.js",
  "v1/ServiceAccount": "kubernetes-models/v1/ServiceAccount.js",
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap.js",
  "v1/Secret": "kubernetes-models/v1/Secret.js",
  "v1/Service": "kubernetes-models/v1/Service.js",
  "v1/PersistentVolumeClaim": "kubernetes-models/v1/PersistentVolumeClaim.js",
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment.js",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget.js",
  "autoscaling/v2/HorizontalPodAutoscaler": "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler.js",
  "networking.k8s.io/v1/NetworkPolicy": "kubernetes-models/networking.k8s.io/v1/NetworkPolicy.js",
  "monitoring.coreos.com/v1/ServiceMonitor":
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js",
  "monitoring.coreos.com/v1/PrometheusRule":
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule.js",
};

// What prometheus-adapter serves the HPA.
const adapterRules =
  YAML.parse(readFileSync(new URL("../prometheus/adapter-rules.yaml", import.meta.url), "utf8")).rules ?? [];

const findings = [];
const fail = (where, what) => findings.push(`${where}: ${what}`);
const check = (cond, where, what) => {
  if (!cond) fail(where, what);
  return cond;
};

function readObjects(file) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
  const out = [];
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
    const o = d.toJS();
    if (o) out.push(o);
  }
  return out;
}

const schemaOf = (o) => SCHEMAS[`${o.apiVersion}/${o.kind}`];

async function validateSchema(where, o) {
  const path = schemaOf(o);
  if (!check(path, where, `no schema for ${o.apiVersion}/${o.kind}: add it to validate.mjs or do not ship it`)) return;
  const mod = await load(path);
  try {
    new mod[o.kind](o).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
}

// One program for every object: typescript parses the interfaces once. The
// generated file sits in OUT_DIR beside a link to the packages, so the
// packages' export maps resolve as they would for any TypeScript user. Each
// object is one line of it, so a diagnostic's line names its object.
function checkStrict(named) {
  const ts = tsModule.default;
  const file = join(outDir, "strict.ts");
  const link = join(outDir, "node_modules");
  if (!existsSync(link)) symlinkSync(modules, link, "dir");
  const typed = named.filter(([, o]) => schemaOf(o));
  const paths = [...new Set(typed.map(([, o]) => schemaOf(o)))];
  const imports = paths.map((path, i) => `import type { I${path.match(/(\w+)\.js$/)[1]} as T${i} } from "${path.replace(/\.js$/, "")}";\n`);
  const literals = typed.map(([, o], i) => `export const o${i}: T${paths.indexOf(schemaOf(o))} = ${JSON.stringify(o)};\n`);
  writeFileSync(file, imports.join("") + literals.join(""));
  const program = ts.createProgram([file], {
    noEmit: true, strict: true, skipLibCheck: true, types: [],
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022,
  });
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    fail(typed[line - imports.length]?.[0] ?? file, `strict schema: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
  }
}

const matches = (selector, labels) =>
  selector && Object.entries(selector).every(([k, v]) => labels && labels[k] === v);

function checkOverlay(name, objects, secrets) {
  const byKind = (kind) => objects.filter((o) => o.kind === kind);
  const one = (kind) => {
    const all = byKind(kind);
    check(all.length === 1, name, `expected one ${kind}, found ${all.length}`);
    return all[0];
  };
  const deploy = one("Deployment");
  const config = one("ConfigMap");
  if (!deploy || !config) return;
  for (const o of objects)
    check(o.kind === "Namespace" || o.metadata.namespace === "splitspec", `${name} ${o.kind}/${o.metadata.name}`,
      "not in namespace splitspec");

  const pod = deploy.spec.template.spec;
  const podLabels = deploy.spec.template.metadata.labels;
  const where = `${name} Deployment/${deploy.metadata.name}`;
  check(matches(deploy.spec.selector.matchLabels, podLabels), where, "selector does not match the pod labels");
  check(deploy.spec.strategy?.rollingUpdate?.maxUnavailable === 0, where, "rollouts may drop capacity (maxUnavailable != 0)");
  const c = pod.containers.find((x) => x.name === "server");
  if (!check(c, where, "no container named server")) return;

  // The server's configuration, as the container reads it.
  const mount = (path) => c.volumeMounts?.find((m) => m.mountPath === path);
  const cfgMount = mount("/etc/splitspec/server.json");
  check(c.args?.join(" ") === "--config /etc/splitspec/server.json", where, "the server is not started with the mounted config");
  const cfgVolume = cfgMount && pod.volumes.find((v) => v.name === cfgMount.name);
  check(cfgVolume?.configMap?.name === config.metadata.name && cfgMount.subPath === "server.json", where,
    "server.json is not mounted from the ConfigMap");
  let server = {};
  try {
    server = JSON.parse(config.data["server.json"]);
    writeFileSync(join(outDir, `${name}-server.json`), config.data["server.json"]);
  } catch (e) {
    fail(`${name} ConfigMap`, `server.json: ${e.message}`);
  }
  const port = (named) => c.ports?.find((p) => p.name === named)?.containerPort;
  const listenPort = (hostPort) => Number(String(hostPort ?? "").split(":").pop());
  check(listenPort(server.listen) === port("grpc"), where, `listen ${server.listen} is not container port grpc`);
  check(listenPort(server.health_listen) === port("health"), where, `health_listen ${server.health_listen} is not container port health`);
  check(listenPort(server.metrics_listen) === port("metrics"), where, `metrics_listen ${server.metrics_listen} is not container port metrics`);
  for (const key of ["listen", "health_listen", "metrics_listen"])
    check(String(server[key]).startsWith("0.0.0.0:"), where, `${key} ${server[key]} is not reachable from outside the pod`);

  // Every file the server opens is on a read-only mount of the right volume.
  const volumeOf = (file) => {
    const m = (c.volumeMounts ?? []).filter((x) => file === x.mountPath || file.startsWith(x.mountPath + "/"))
      .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
    return m && { mount: m, volume: pod.volumes.find((v) => v.name === m.name) };
  };
  for (const key of ["tls_cert", "tls_key", "tls_client_ca", "auth_tokens_file"]) {
    if (!server[key]) continue;
    const v = volumeOf(server[key]);
    if (!check(v?.volume?.secret, where, `${key} ${server[key]} is not on a Secret volume`)) continue;
    check(v.mount.readOnly && !v.mount.subPath, where, `${key}: its Secret must be mounted read-only and whole (a subPath never sees a renewal)`);
    const secret = secrets.find((s) => s.metadata.name === v.volume.secret.secretName);
    const file = server[key].slice(v.mount.mountPath.length + 1);
    check(secret && (secret.data?.[file] !== undefined || secret.stringData?.[file] !== undefined), where,
      `${key}: deploy/kubernetes/secrets makes no ${v.volume.secret.secretName} with key ${file}`);
  }
  check(server.tls_cert && server.auth_tokens_file, where, "a cluster server must speak TLS and require tokens");
  const models = volumeOf(server.target ?? "");
  check(models?.volume?.persistentVolumeClaim && models.mount.readOnly, where, `target ${server.target} is not on a read-only model volume`);
  const pvc = models && objects.find((o) => o.kind === "PersistentVolumeClaim" && o.metadata.name === models.volume.persistentVolumeClaim.claimName);
  check(pvc, where, "the models' PersistentVolumeClaim is not shipped");
  for (const m of c.volumeMounts ?? [])
    check(pod.volumes.some((v) => v.name === m.name), where, `mount ${m.mountPath} has no volume ${m.name}`);

  // Non-root, nothing writable but /tmp, no privileges: Pod Security "restricted".
  const sc = c.securityContext ?? {};
  check(pod.securityContext?.runAsNonRoot === true && pod.securityContext?.runAsUser > 0, where, "may run as root");
  check(pod.securityContext?.seccompProfile?.type === "RuntimeDefault", where, "no RuntimeDefault seccomp profile");
  check(sc.readOnlyRootFilesystem === true, where, "root file system is writable");
  check(sc.allowPrivilegeEscalation === false, where, "privilege escalation allowed");
  check(sc.capabilities?.drop?.includes("ALL"), where, "capabilities are not all dropped");
  check(pod.automountServiceAccountToken === false, where, "mounts a service account token the server never uses");
  const tmp = volumeOf("/tmp");
  check(tmp?.volume?.emptyDir, where, "no writable /tmp (emptyDir)");

  // Probes: grpc.health.v1 on the plaintext health port.
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const p = c[probe];
    check(p?.grpc?.port === port("health"), where, `${probe} is not a gRPC probe on the health port`);
  }
  // Draining: the grace period covers preStop, the server's drain and slack,
  // and liveness cannot kill a replica in the middle of a drain.
  const preStop = c.lifecycle?.preStop?.exec?.command;
  const preStopS = preStop?.[0] === "/bin/sleep" ? Number(preStop[1]) : NaN;
  check(Number.isFinite(preStopS) && preStopS > 0, where, "no preStop sleep (endpoints need time to drop the pod)");
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  const drain = Number(server.shutdown_grace_s ?? 10);
  check(grace >= preStopS + drain + 5, where,
    `terminationGracePeriodSeconds ${grace} < preStop ${preStopS} + shutdown_grace_s ${drain} + 5`);
  const live = c.livenessProbe ?? {};
  check((live.periodSeconds ?? 10) * (live.failureThreshold ?? 3) > preStopS + drain, where,
    "liveness would kill a draining replica (period x failureThreshold <= preStop + shutdown_grace_s)");
  check((c.readinessProbe?.failureThreshold ?? 3) === 1, where, "readiness should fail at the first NOT_SERVING");

  // Resources, and the compute threads following the CPU limit.
  const r = c.resources ?? {};
  check(r.requests?.cpu && r.requests?.memory && r.limits?.memory, where, "no CPU and memory requests and a memory limit");
  const omp = c.env?.find((e) => e.name === "OMP_NUM_THREADS");
  check(server.compute_threads === 0 && omp?.valueFrom?.resourceFieldRef?.resource === "limits.cpu" && r.limits?.cpu, where,
    "compute threads do not follow the CPU limit (compute_threads 0 with OMP_NUM_THREADS from limits.cpu)");
  const gpu = r.limits?.["nvidia.com/gpu"];
  const device = String(server.device ?? "cpu");
  if (name === "gpu") {
    check(gpu === "1" || gpu === 1, where, "the GPU overlay asks for no GPU");
    check(pod.tolerations?.some((t) => t.key === "nvidia.com/gpu"), where, "the GPU overlay tolerates no GPU taint");
    check(pod.nodeSelector && Object.keys(pod.nodeSelector).length > 0, where, "the GPU overlay selects no node pool");
    // The GPU it asks for is the one the server computes on, in the image built with the CUDA backend.
    check(device === "cuda" || device === "cuda:0", where, `the GPU overlay's server computes on ${device}, not its GPU (device cuda)`);
    check(String(c.image).endsWith("-gpu"), where, `image ${c.image} is not the GPU image (deploy/image/build.sh --gpu, tag *-gpu)`);
  } else {
    check(gpu === undefined && !pod.tolerations, where, "a CPU overlay asks for GPUs or tolerates taints");
    check(device === "cpu", where, `a CPU overlay's server computes on ${device}`);
  }

  // Services, headless balancing, PDB, HPA, monitoring and network policy
  // all point at these pods and ports.
  const services = byKind("Service");
  for (const s of services) {
    const w = `${name} Service/${s.metadata.name}`;
    check(matches(s.spec.selector, podLabels), w, "selects no server pod");
    for (const p of s.spec.ports) check(port(p.targetPort) !== undefined, w, `targetPort ${p.targetPort} is no container port`);
  }
  const headless = services.find((s) => s.spec.clusterIP === "None");
  check(headless && headless.spec.ports.some((p) => p.targetPort === "grpc") && !headless.spec.publishNotReadyAddresses,
    name, "no headless Service of ready replicas' gRPC port (client-side balancing)");
  const pdb = one("PodDisruptionBudget");
  check(pdb && matches(pdb.spec.selector.matchLabels, podLabels) && (pdb.spec.maxUnavailable === 1 || pdb.spec.minAvailable),
    `${name} PodDisruptionBudget`, "does not cover the server pods");
  const hpa = one("HorizontalPodAutoscaler");
  if (hpa) {
    const w = `${name} HorizontalPodAutoscaler`;
    check(hpa.spec.scaleTargetRef.kind === "Deployment" && hpa.spec.scaleTargetRef.name === deploy.metadata.name, w, "scales something else");
    check(hpa.spec.minReplicas >= 2 && hpa.spec.maxReplicas >= hpa.spec.minReplicas, w, "fewer than 2 replicas at minimum");
    const metrics = hpa.spec.metrics.map((m) => m.pods?.metric?.name);
    check(metrics.includes("splitspec_num_waiting_rounds"), w, "does not scale on waiting rounds");
    check(!("replicas" in deploy.spec) || deploy.spec.replicas >= hpa.spec.minReplicas, w, "Deployment replicas below minReplicas");
    const adapted = adapterRules.map((r) => r.name?.as);
    for (const m of metrics)
      check(adapted.includes(m), w, `${m} has no rule in deploy/prometheus/adapter-rules.yaml: the HPA would never see it`);
  }
  const sm = one("ServiceMonitor");
  if (sm) {
    const scraped = services.filter((s) => matches(sm.spec.selector.matchLabels, s.metadata.labels));
    check(scraped.length === 1 && sm.spec.endpoints.every((e) => scraped[0].spec.ports.some((p) => p.name === e.port)),
      `${name} ServiceMonitor`, "must select exactly the Service whose port it scrapes");
  }
  const np = one("NetworkPolicy");
  if (np) {
    const w = `${name} NetworkPolicy`;
    check(matches(np.spec.podSelector.matchLabels, podLabels), w, "does not apply to the server pods");
    const open = np.spec.ingress.flatMap((rule) => rule.ports.map((p) => p.port));
    check(open.includes("grpc") && open.includes("metrics"), w, "grpc or metrics is not let in");
    check(np.spec.policyTypes.includes("Egress") && np.spec.egress.length === 0, w, "the server may call out");
  }
  const ns = one("Namespace");
  check(ns?.metadata.labels?.["pod-security.kubernetes.io/enforce"] === "restricted", `${name} Namespace`,
    "does not enforce Pod Security restricted");
  const rules = one("PrometheusRule");
  if (rules) writeFileSync(join(outDir, `${name}-rules.yaml`), YAML.stringify({ groups: rules.spec.groups }));
}

const rendered = {};
const named = [];
for (const arg of inputs) {
  const [name, file] = arg.split("=");
  rendered[name] = readObjects(file);
  for (const o of rendered[name]) {
    const where = `${name} ${o.kind}/${o.metadata?.name}`;
    await validateSchema(where, o);
    named.push([where, o]);
  }
}
checkStrict(named);
const secrets = rendered.secrets ?? [];
check(secrets.length === 2, "secrets", `expected the TLS and token Secrets, found ${secrets.length}`);
for (const [name, objects] of Object.entries(rendered)) if (name !== "secrets") checkOverlay(name, objects, secrets);

for (const f of findings) console.log(`deploy check: ${f}`);
const counts = Object.entries(rendered).map(([n, o]) => `${n} ${o.length}`).join(", ");
console.log(findings.length ? `deploy check: ${findings.length} finding(s)` : `deploy check: OK (objects: ${counts})`);
process.exit(findings.length ? 1 : 0);
