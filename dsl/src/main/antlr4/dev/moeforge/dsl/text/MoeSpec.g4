/*
 * The textual form of MoeForge kernel specs. Deliberately generic: a section holds a call, an
 * expression or a name, and every function (problem, schedule, epilogue node) is resolved by name
 * in Java (FunctionRegistry), so a new kind of node needs no change here.
 */
grammar MoeSpec;

file : kernel* EOF ;

kernel : 'kernel' name '{' section* '}' ;

section
    : 'problem' call     # problemSection
    | 'schedule' call    # scheduleSection
    | 'epilogue' expr    # epilogueSection
    | 'target' name      # targetSection
    ;

call : name '(' (arg (',' arg)*)? ')' ;

arg : (name '=')? expr ;

expr
    : call      # callExpr
    | name      # nameExpr
    | NUMBER    # numberExpr
    ;

// The keywords only start a kernel or a section; anywhere else they are ordinary names, so every
// C identifier (what the Validator allows as a kernel name) can be written, and printed back.
name
    : IDENT                                                         # identName
    | ('kernel' | 'problem' | 'schedule' | 'epilogue' | 'target')   # keywordName
    ;

IDENT : [A-Za-z_] [A-Za-z0-9_]* ;

// Named so that SpecParser can measure how deep calls nest before the parser descends into them.
OPEN : '(' ;
CLOSE : ')' ;

// Signed, so that an out-of-range value reaches the Validator and gets its message, and any spec prints parseably.
NUMBER : '-'? [0-9]+ ('.' [0-9]+)? ([eE] [+-]? [0-9]+)? ;

COMMENT : ('#' | '//') ~[\r\n]* -> skip ;

WS : [ \t\r\n]+ -> skip ;
