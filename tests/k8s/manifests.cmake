# Tests of the Kubernetes manifests (k8s/deploy, and k8s/monitoring's kustomization: the
# PrometheusRule and the dashboard's ConfigMap), independent of the device plugin's build:
# k8s_manifests_parse (YAML and fracgpu's own rules, needs only python3-yaml) and
# k8s_manifests_schema (every kustomization built with the pinned kubectl, the output
# validated against the Kubernetes API types, the validator's bad fixtures refused), which
# needs the tools that tools/fetch_manifest_tools.sh puts in FRACGPU_MANIFEST_TOOLS_DIR.
# Without them the schema test is left out with a warning, unless
# FRACGPU_REQUIRE_MANIFEST_TOOLS is on (CI), where configuring fails.
option(FRACGPU_REQUIRE_MANIFEST_TOOLS
       "Fail configuring when the Kubernetes manifest tools (kubectl, Node.js, kubernetes-models) are missing" OFF)
# This build's own folder, else the one tools/bootstrap.sh fills (build/manifest-tools), so
# that other build folders (sanitizer builds, developers' own) find the tools too.
set(_manifest_tools_default ${CMAKE_BINARY_DIR}/manifest-tools)
if(NOT EXISTS ${_manifest_tools_default}/bin/kubectl AND EXISTS ${PROJECT_SOURCE_DIR}/build/manifest-tools/bin/kubectl)
  set(_manifest_tools_default ${PROJECT_SOURCE_DIR}/build/manifest-tools)
endif()
set(FRACGPU_MANIFEST_TOOLS_DIR "${_manifest_tools_default}" CACHE PATH
    "Where tools/fetch_manifest_tools.sh put kubectl and the schema validator's npm packages")

find_package(Python3 COMPONENTS Interpreter)
set(_manifest_check ${CMAKE_CURRENT_SOURCE_DIR}/check_manifests.py)
set(_manifest_missing "")
if(Python3_FOUND)
  add_test(NAME k8s_manifests_parse COMMAND ${Python3_EXECUTABLE} ${_manifest_check} ${PROJECT_SOURCE_DIR}/k8s/deploy
                                           --also ${PROJECT_SOURCE_DIR}/k8s/monitoring)
  set_tests_properties(k8s_manifests_parse PROPERTIES LABELS k8s TIMEOUT 60)
else()
  list(APPEND _manifest_missing "python3")
endif()

find_program(FRACGPU_NODE NAMES node nodejs DOC "Node.js, for the Kubernetes manifest schema check")
if(NOT FRACGPU_NODE)
  list(APPEND _manifest_missing "node (Debian: apt-get install nodejs npm)")
endif()
if(NOT EXISTS ${FRACGPU_MANIFEST_TOOLS_DIR}/bin/kubectl)
  list(APPEND _manifest_missing "${FRACGPU_MANIFEST_TOOLS_DIR}/bin/kubectl")
endif()
# The fetch script stamps the schema packages with the lock they were installed from; a
# stale install (the committed lock moved on) counts as missing.
file(SHA256 ${CMAKE_CURRENT_SOURCE_DIR}/schema/package-lock.json _lock_wanted)
set(_lock_stamp ${FRACGPU_MANIFEST_TOOLS_DIR}/schema/installed.lock.json)
if(EXISTS ${_lock_stamp})
  file(SHA256 ${_lock_stamp} _lock_installed)
else()
  set(_lock_installed none)
endif()
if(NOT _lock_installed STREQUAL _lock_wanted)
  list(APPEND _manifest_missing "the schema packages of tests/k8s/schema/package-lock.json in ${FRACGPU_MANIFEST_TOOLS_DIR}/schema")
endif()
# Re-run the checks above when the lock or the stamp changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/schema/package-lock.json)
if(EXISTS ${_lock_stamp})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_lock_stamp})
endif()

if(_manifest_missing)
  list(JOIN _manifest_missing "; " _manifest_missing_text)
  string(CONCAT _manifest_message
      "Kubernetes manifest schema test (k8s_manifests_schema) not registered: missing ${_manifest_missing_text}. "
      "Run tools/fetch_manifest_tools.sh ${FRACGPU_MANIFEST_TOOLS_DIR} (needs node, npm and the npm registry; "
      "tools/bootstrap.sh runs it) and configure again.")
  if(FRACGPU_REQUIRE_MANIFEST_TOOLS)
    message(FATAL_ERROR "${_manifest_message} FRACGPU_REQUIRE_MANIFEST_TOOLS is ON.")
  endif()
  message(WARNING "${_manifest_message}")
else()
  add_test(NAME k8s_manifests_schema
           COMMAND ${Python3_EXECUTABLE} ${_manifest_check} ${PROJECT_SOURCE_DIR}/k8s/deploy
                   --also ${PROJECT_SOURCE_DIR}/k8s/monitoring
                   --tools ${FRACGPU_MANIFEST_TOOLS_DIR} --node ${FRACGPU_NODE})
  set_tests_properties(k8s_manifests_schema PROPERTIES LABELS k8s TIMEOUT 120)
  message(STATUS "Kubernetes manifest schema test: kubectl and kubernetes-models from ${FRACGPU_MANIFEST_TOOLS_DIR}")
endif()
