# Bedrock Custom Model Import: a second promotion target for the same model release (docs/bedrock.md).
#
# make bedrock-package ENV=..   the published release's package (unquantized bf16, one merged model
#                               per adapter), checked against every import rule, published beside it
# make bedrock-import ENV=..    import the models bedrock.models names (idempotent by the package's
#                               digest), record each ARN against the release, smoke-check, clean up
.PHONY: bedrock-package bedrock-import

bedrock-package: venv .venv-serving/.stamp ## deploy | build and publish the model release's Bedrock Custom Model Import package (once per release)
	$(PY) -m tools.bedrock_package --env $(ENV) --package-python $(SPY)

bedrock-import: venv ## deploy | import the Bedrock package models bedrock.models names (once per package digest), record, smoke-check, delete unnamed imports
	$(PY) -m tools.bedrock_import --env $(ENV)
