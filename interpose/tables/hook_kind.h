// The kind column of tables/hooks.def turned into code: FRACGPU_HOOK_KIND(prefix, symbol,
// pfn, kind) expands to prefix_FORWARD(symbol, pfn, void), prefix_BODY(symbol, pfn, void),
// prefix_GATED(symbol, pfn, locator) or prefix_RESIDENT(symbol, pfn, void). Each consumer of
// the table defines the four prefix_ macros it needs (hook_bodies.h: the HookBody declarations;
// core/hook_catalog.h: the catalog's kind field). Data only: no types, includable by every layer.
// Compile-time only, no cost at run time.
#pragma once

#define FRACGPU_HOOK_KIND_OF_FORWARD FORWARD, void
#define FRACGPU_HOOK_KIND_OF_BODY BODY, void
#define FRACGPU_HOOK_KIND_OF_GATED(locator) GATED, locator
#define FRACGPU_HOOK_KIND_OF_RESIDENT RESIDENT, void

// Two levels so that the kind column is expanded into "name, locator" before the paste.
#define FRACGPU_HOOK_KIND(prefix, symbol, pfn, kind) \
  FRACGPU_HOOK_KIND_EXPANDED(prefix, symbol, pfn, FRACGPU_HOOK_KIND_OF_##kind)
#define FRACGPU_HOOK_KIND_EXPANDED(prefix, symbol, pfn, kind) \
  FRACGPU_HOOK_KIND_PASTE(prefix, symbol, pfn, kind)
#define FRACGPU_HOOK_KIND_PASTE(prefix, symbol, pfn, name, locator) \
  prefix##_##name(symbol, pfn, locator)
