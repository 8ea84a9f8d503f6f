#!/usr/bin/env node
// Validates Kubernetes objects (multi-document YAML, as `kubectl kustomize` prints them)
// against the Kubernetes API types: each object is built as its kubernetes-models model
// (or, for the Prometheus Operator's CRDs, its @kubernetes-models/prometheus-operator
// model) and validated with the model's JSON schema (required fields, types, enums,
// formats). On top of the schema it reports what the API server would refuse and the
// schema lets through: fields the type does not have (kubectl's strict field validation),
// an object without metadata.name, and a container without an image. An apiVersion/kind
// with no model is an error, never skipped. Prints one line per problem,
// "<label>: <Kind>/<name>: <path>: <message>", and exits 1 if there is any (2 for bad usage).
//   node validate.js [--label LABEL] [FILE|-] ...   (--label names the input after it;
//   stdin when no file is given)
"use strict";

const fs = require("fs");
const YAML = require("yaml");

// Where the models live, by API group: the core and built-in groups, then the CRDs that
// fracgpu's manifests use (the production overlay's ServiceMonitor).
const MODEL_PACKAGES = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

// Guards the require() below: an apiVersion is "v1" or "<dns-name>/<version>".
const API_VERSION_RE = /^([a-z0-9]([a-z0-9.-]*[a-z0-9])?\/)?v[0-9]+((alpha|beta)[0-9]+)?$/;
const KIND_RE = /^[A-Z][A-Za-z0-9]*$/;

function findModel(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" ||
      !API_VERSION_RE.test(apiVersion) || !KIND_RE.test(kind)) {
    return null;
  }
  for (const pkg of MODEL_PACKAGES) {
    let module;
    try {
      module = require(`${pkg}/${apiVersion}`);
    } catch (error) {
      if (error.code === "MODULE_NOT_FOUND" || error.code === "ERR_PACKAGE_PATH_NOT_EXPORTED") continue;
      throw error;
    }
    const Model = module[kind];
    // The group/version modules also export the nested types (Container, ObjectMeta, ...);
    // only a top-level kind carries its own apiVersion and kind.
    if (typeof Model === "function" && Model.apiVersion === apiVersion && Model.kind === kind) return Model;
  }
  return null;
}

// The generated validators read each property their schema defines and enumerate the
// keys of maps (additionalProperties), but never complain about a property they do not
// know. So the object is validated through proxies that record what was read: in an
// object from which the validator read properties without enumerating it, a key it never
// read is a field the type does not have. An object it neither read nor enumerated is
// free-form in the schema (x-kubernetes-preserve-unknown-fields) and is not judged.
// The schema generator drops properties named "description" (it strips the keyword of
// that name) and the x-kubernetes-* extensions of CRD schemas; comparing every model's
// declared fields with what its validator reads finds no other gap, so those names alone
// are taken on trust (PriorityClass.description is real).
const NOT_IN_VALIDATORS = (key) => key === "description" || key.startsWith("x-kubernetes-");

function tracked(value, records) {
  if (value === null || typeof value !== "object") return value;
  let record = records.get(value);
  if (record) return record.proxy;
  record = { read: new Set(), enumerated: false, proxy: null };
  records.set(value, record);
  record.proxy = new Proxy(value, {
    get(target, property, receiver) {
      if (typeof property === "string") record.read.add(property);
      return tracked(Reflect.get(target, property, receiver), records);
    },
    has(target, property) {
      if (typeof property === "string") record.read.add(property);
      return Reflect.has(target, property);
    },
    ownKeys(target) {
      record.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
  return record.proxy;
}

function unknownFields(value, records, path, out) {
  const record = records.get(value);
  if (!record) return;
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, records, `${path}[${i}]`, out));
    return;
  }
  const judged = !record.enumerated && record.read.size > 0;
  for (const key of Object.keys(value)) {
    const child = path ? `${path}.${key}` : key;
    if (judged && !record.read.has(key) && !NOT_IN_VALIDATORS(key)) {
      out.push([child, "unknown field (not in the API type)"]);
    } else {
      unknownFields(value[key], records, child, out);
    }
  }
}

// "/spec/template/spec/containers/0/image" -> "spec.template.spec.containers[0].image"
function dotted(pointer) {
  let path = "";
  for (const raw of pointer.split("/").slice(1)) {
    const part = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    path += /^[0-9]+$/.test(part) ? `[${part}]` : path ? `.${part}` : part;
  }
  return path;
}

function schemaProblems(error) {
  if (!Array.isArray(error.errors)) throw error;
  // A value that fits none of a oneOf's forms (IntOrString, Quantity) gets an error per
  // form plus one for the oneOf itself: one line says it better.
  const alternatives = new Map();
  for (const e of error.errors) {
    if (e.keyword === "oneOf" || e.keyword === "anyOf") alternatives.set(e.instancePath, []);
  }
  const errors = [];
  for (const e of error.errors) {
    const forms = alternatives.get(e.instancePath);
    if (!forms) errors.push(e);
    else if (e.keyword === "oneOf" || e.keyword === "anyOf") errors.push({ ...e, forms });
    else forms.push(e.message);
  }
  return errors.map((e) => {
    if (e.forms) return [dotted(e.instancePath) || "(object)", e.forms.join(" or ")];
    const path = dotted(e.instancePath);
    if (e.keyword === "required") {
      return [path ? `${path}.${e.params.missingProperty}` : e.params.missingProperty, "required field missing"];
    }
    let message = e.message;
    if (e.keyword === "enum") message += `: ${e.params.allowedValues.join(", ")}`;
    return [path || "(object)", message];
  });
}

// Where a kind keeps its pod spec: the API server requires an image in every container
// there, although the OpenAPI schema leaves Container.image optional (for templates that
// a config tool fills in, as kustomize's images: does).
const POD_SPEC_PATHS = {
  Pod: ["spec"],
  CronJob: ["spec", "jobTemplate", "spec", "template", "spec"],
};
const TEMPLATE_KINDS = ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"];

function missingImages(object) {
  const at = POD_SPEC_PATHS[object.kind] || (TEMPLATE_KINDS.includes(object.kind) ? ["spec", "template", "spec"] : null);
  if (!at) return [];
  let spec = object;
  for (const key of at) spec = spec && typeof spec === "object" ? spec[key] : undefined;
  if (!spec || typeof spec !== "object") return [];
  const out = [];
  for (const list of ["initContainers", "containers"]) {
    if (!Array.isArray(spec[list])) continue;
    spec[list].forEach((container, i) => {
      if (container && typeof container === "object" && (typeof container.image !== "string" || container.image === "")) {
        out.push([`${at.join(".")}.${list}[${i}].image`, "required (the API server refuses a container without an image)"]);
      }
    });
  }
  return out;
}

function check(object) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    return [["(document)", "not a Kubernetes object (a YAML mapping)"]];
  }
  const problems = [];
  const name = object.metadata && object.metadata.name;
  if (typeof name !== "string" || name === "") {
    problems.push(["metadata.name", "required (kubectl apply needs a name)"]);
  }
  const Model = findModel(object.apiVersion, object.kind);
  if (!Model) {
    problems.push(["(object)", `no schema for apiVersion ${JSON.stringify(object.apiVersion)}, kind ` +
                   `${JSON.stringify(object.kind)} (not a Kubernetes type nor a known CRD)`]);
    return problems;
  }
  const model = new Model(object);
  const records = new Map();
  try {
    model.validate.call(tracked(model, records));
  } catch (error) {
    problems.push(...schemaProblems(error));
  }
  unknownFields(model, records, "", problems);
  problems.push(...missingImages(object));
  return problems;
}

function describe(object) {
  if (object === null || typeof object !== "object") return "(document)";
  const name = (object.metadata && object.metadata.name) || "(unnamed)";
  return `${object.kind || "(no kind)"}/${name}`;
}

function validateText(text, label) {
  const lines = [];
  let objects = 0;
  // YAML 1.1, as kubectl and the API server read manifests (sigs.k8s.io/yaml): there
  // `yes`, `on` and `off` are booleans, so an unquoted env value "on" is no string.
  for (const document of YAML.parseAllDocuments(text, { version: "1.1" })) {
    if (document.errors.length) {
      for (const error of document.errors) lines.push(`${label}: YAML: ${error.message.split("\n")[0]}`);
      continue;
    }
    const object = document.toJS({ maxAliasCount: 100 });
    if (object === null || object === undefined) continue;
    objects++;
    for (const [path, message] of check(object)) lines.push(`${label}: ${describe(object)}: ${path}: ${message}`);
  }
  return { lines, objects };
}

function main(argv) {
  const inputs = [];
  let label = null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--label") {
      if (i + 1 >= argv.length) return usage("--label needs a value");
      label = argv[++i];
    } else if (argv[i].startsWith("--")) {
      return usage(`unknown option ${argv[i]}`);
    } else {
      inputs.push({ file: argv[i], label: label || argv[i] });
      label = null;
    }
  }
  if (inputs.length === 0) inputs.push({ file: "-", label: label || "(stdin)" });

  let objects = 0;
  let problems = 0;
  for (const input of inputs) {
    let text;
    try {
      text = fs.readFileSync(input.file === "-" ? 0 : input.file, "utf8");
    } catch (error) {
      console.error(`validate: cannot read ${input.file}: ${error.message}`);
      return 2;
    }
    const result = validateText(text, input.label);
    objects += result.objects;
    problems += result.lines.length;
    for (const line of result.lines) console.log(line);
  }
  console.error(`validate: ${objects} objects, ${problems} problems`);
  return problems ? 1 : 0;
}

function usage(message) {
  console.error(`validate: ${message}\nusage: node validate.js [--label LABEL] [FILE|-] ...`);
  return 2;
}

process.exitCode = main(process.argv.slice(2));
