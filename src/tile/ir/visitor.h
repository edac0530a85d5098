// Walking and rewriting the tile IR. IRVisitor visits every node (override the kinds you care
// about and call the base to keep descending); IRMutator rebuilds a tree bottom-up, reusing every
// node whose children did not change. Both dispatch on NodeKind through the X-macro lists, so a
// new node kind is one line in ir.h plus its cases here.
#pragma once

#include <map>

#include "tile/ir/ir.h"

namespace tessel::tile {

class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  void visit(const Expr& e);
  void visit(const Stmt& s);
  void visit_tile(const TileRef& t);

 protected:
#define TESSEL_TILE_VISIT_DECL(name) virtual void visit_node(const name* node);
  TESSEL_TILE_EXPR_KINDS(TESSEL_TILE_VISIT_DECL)
  TESSEL_TILE_STMT_KINDS(TESSEL_TILE_VISIT_DECL)
#undef TESSEL_TILE_VISIT_DECL
};

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  Expr mutate(const Expr& e);
  Stmt mutate(const Stmt& s);
  std::vector<Expr> mutate(const std::vector<Expr>& es);
  TileRef mutate_tile(const TileRef& t);
  // Buffers referenced by nodes pass through here; a pass that changes buffers (new shapes,
  // layouts) overrides it and keeps its own old -> new table.
  virtual Buffer mutate_buffer(const Buffer& b) { return b; }

 protected:
#define TESSEL_TILE_MUTATE_EXPR_DECL(name) virtual Expr mutate_node(const name* node, const Expr& self);
#define TESSEL_TILE_MUTATE_STMT_DECL(name) virtual Stmt mutate_node(const name* node, const Stmt& self);
  TESSEL_TILE_EXPR_KINDS(TESSEL_TILE_MUTATE_EXPR_DECL)
  TESSEL_TILE_STMT_KINDS(TESSEL_TILE_MUTATE_STMT_DECL)
#undef TESSEL_TILE_MUTATE_EXPR_DECL
#undef TESSEL_TILE_MUTATE_STMT_DECL
};

}  // namespace tessel::tile

namespace tessel::tile {

// `s` with every reference to a buffer in `replacements` (keyed by the old node) swapped for
// the new one: how passes change a buffer's layout.
Stmt replace_buffers(const Stmt& s, const std::map<const BufferNode*, Buffer>& replacements);

}  // namespace tessel::tile
