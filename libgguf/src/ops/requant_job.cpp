// run_requant_job and import_input: gguf-requant's flows from paths to a plan.
#include "gguf/ops/requant_job.h"

#include "gguf/ops/hf_import.h"
#include "gguf/ops/recipe.h"

namespace gguf {

std::vector<TypeRule> parse_type_rules(const RuleArgs& a) {
  if (a.leave_output && a.output_type)
    usage_error("--leave-output-tensor and --output-tensor-type exclude each other");
  std::vector<TypeRule> rules;
  if (a.leave_output) rules.push_back(leave_output_tensor_rule());
  if (a.output_type)
    rules.push_back(
        named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", *a.output_type));
  if (a.embedding_type)
    rules.push_back(named_type_rule(TypeRule::Kind::kTokenEmbedding, "--token-embedding-type",
                                    *a.embedding_type));
  for (auto& r : tensor_type_rules(a.tensor_types, a.type_files, a.tensor_type_order))
    rules.push_back(std::move(r));
  for (const auto& v : a.role_types) rules.push_back(parse_role_type_rule(v));
  return rules;
}

namespace {

// The files besides the model and the donors that a job reads: an output (the GGUF or the
// plan-out recipe) must not be one of them.
void add_job_files(std::vector<std::string>& inputs, const RequantJob& job) {
  for (const std::string* p : {&job.imatrix_path, &job.recipe_from})
    if (!p->empty()) inputs.push_back(*p);
  inputs.insert(inputs.end(), job.rule_files.begin(), job.rule_files.end());
}

// The budgeted mix: the budget parsed, the plan-out path checked before the measuring (against
// every input: it is written last, after the GGUF, and must not fail then for what was known
// now), the recipe kept for execute_plan.
void plan_job(RequantJobResult& r, const RequantJob& job, std::vector<TypeRule> rules,
              const WriteOptions& write) {
  const MixRequest& m = *job.mix;
  PlannerOptions po;
  if (m.target_size) po.target_size = parse_target_size(*m.target_size);
  if (m.target_bpw) po.target_bpw = parse_target_bpw(*m.target_bpw);
  if (m.candidates) po.candidates = parse_candidates(*m.candidates);
  if (!m.plan_out.empty()) {
    WriteOptions wo = write;
    for (const auto& s : r.model->shards()) wo.inputs.push_back(s->path());
    add_job_files(wo.inputs, job);
    wo.inputs.insert(wo.inputs.end(), m.donors.begin(), m.donors.end());
    check_output(m.plan_out, wo);
  }
  for (const auto& d : m.donors) r.donors.push_back(std::make_shared<const Model>(Model::open(d)));
  for (const auto& d : r.donors) po.donors.push_back(d.get());
  po.donor_paths = m.donors;
  po.imatrix = r.imatrix.get();
  po.untie_gate_up = m.untie_gate_up;
  po.selector = job.selector;
  po.rules = std::move(rules);
  po.threads = job.threads;
  po.progress = m.progress;
  po.alignment = job.alignment;
  r.planned = plan_mix(*r.model, po);
  r.inputs = r.planned->requant.inputs;
  add_job_files(r.inputs, job);
  if (!m.plan_out.empty()) r.side_files.push_back({m.plan_out, plan_recipe(*r.planned)});
}

}  // namespace

RequantJobResult run_requant_job(const RequantJob& job, const WriteOptions& write) {
  RequantJobResult r;
  r.model = std::make_shared<const Model>(Model::open(job.input));
  std::vector<TypeRule> rules = job.rules;
  if (!job.recipe_from.empty())
    for (auto& rule :
         recipe_type_rules(extract_recipe(Model::open(job.recipe_from)), job.recipe_from))
      rules.push_back(std::move(rule));
  if (job.keep_split && r.model->shards().size() > 1)
    r.split_tensor_counts = shard_tensor_counts(*r.model);
  if (!job.imatrix_path.empty())
    r.imatrix = std::make_shared<const Imatrix>(Imatrix::load(job.imatrix_path));
  if (job.mix) {
    plan_job(r, job, std::move(rules), write);
    return r;
  }
  r.requant = requant(*r.model, {job.type, job.selector, r.imatrix.get(), job.threads, job.exact,
                                 std::move(rules), job.alignment});
  r.inputs = r.requant->inputs;
  add_job_files(r.inputs, job);
  return r;
}

ImportJob run_import_job(const std::string& path, const std::string& config_path,
                         const std::string& base_path, ImportOptions options) {
  auto checkpoint = std::make_shared<const HfCheckpoint>(HfCheckpoint::open(path, config_path));
  std::shared_ptr<const Model> base;
  if (!base_path.empty()) base = std::make_shared<const Model>(Model::open(base_path));
  options.base = base.get();
  const HfCheckpoint& c = *checkpoint;
  // One file without config.json or index: GGUF names, as they are.
  const bool plain = c.shards().size() == 1 && !c.config() && c.index_path().empty();
  return {checkpoint, base,
          plain ? import_safetensors(c.shards()[0], options) : import_checkpoint(c, options)};
}

}  // namespace gguf
