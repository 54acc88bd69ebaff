-- A service.db as 21562bd's code made it (serve tokens alone): made once by running make_old_database.py
-- beside this file with a git worktree of that commit on PYTHONPATH, dumped with sqlite3's iterdump.
-- Tokens: 21562bd-alice-token, 21562bd-bob-token (bob revoked where the code could), 21562bd-instructor-token.
BEGIN TRANSACTION;
CREATE TABLE attempts (
	id INTEGER NOT NULL, 
	student_id VARCHAR(100) NOT NULL, 
	assignment VARCHAR(100) NOT NULL, 
	number INTEGER NOT NULL, 
	submitted_at DATETIME NOT NULL, 
	status VARCHAR(20) NOT NULL, 
	score FLOAT, 
	raw_score FLOAT, 
	late_penalty FLOAT, 
	max_score FLOAT, 
	integrity TEXT, 
	graded_at DATETIME, 
	seconds FLOAT, 
	results_written INTEGER NOT NULL, 
	feedback TEXT, 
	notebook BLOB NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (student_id, assignment, number), 
	FOREIGN KEY(student_id) REFERENCES students (student_id)
);
INSERT INTO "attempts" VALUES(1,'alice','autograd',1,'2026-12-04 16:02:59.733049','graded',41.5,41.5,0.0,57.0,'[]','2026-12-04 16:02:59.737240',1.25,1,'{"score": 41.5}',X'7B2263656C6C73223A205B5D2C20226D65746164617461223A207B7D2C20226E62666F726D6174223A20342C20226E62666F726D61745F6D696E6F72223A20357D');
INSERT INTO "attempts" VALUES(2,'alice','autograd',2,'2026-12-04 16:02:59.738195','queued',NULL,NULL,NULL,NULL,NULL,NULL,NULL,0,NULL,X'7B2263656C6C73223A205B315D2C20226D65746164617461223A207B7D2C20226E62666F726D6174223A20342C20226E62666F726D61745F6D696E6F72223A20357D');
CREATE TABLE instructors (
	id INTEGER NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (token_hash)
);
INSERT INTO "instructors" VALUES(1,'e2614a3c3060840d29d92fbae95b3696106f20e86d0cd3ae918ecf89d75f33f0');
CREATE TABLE retired_tokens (
	token_hash VARCHAR(64) NOT NULL, 
	student_id VARCHAR(100), 
	reason VARCHAR(20) NOT NULL, 
	retired_at DATETIME NOT NULL, 
	PRIMARY KEY (token_hash), 
	FOREIGN KEY(student_id) REFERENCES students (student_id)
);
INSERT INTO "retired_tokens" VALUES('2cb96ab23207066b15ff4eff18cde2a64437b182b156d554dbd078b586c59249','bob','revoked','2026-12-04 16:02:59.741685');
CREATE TABLE settings (
	name VARCHAR(50) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY (name)
);
INSERT INTO "settings" VALUES('csrf','12beb69782bb2681ea5555dea0df0f3d600f476cb1beb8423ea1f479cc744345');
CREATE TABLE students (
	student_id VARCHAR(100) NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	lms TEXT NOT NULL, 
	PRIMARY KEY (student_id), 
	UNIQUE (token_hash)
);
INSERT INTO "students" VALUES('alice','9f841cd62b275e46e3b7b4ed1c44f6e54d6b73dbb6921a073f08fd3067866edc','{"lms_id": "101"}');
INSERT INTO "students" VALUES('bob','2cb96ab23207066b15ff4eff18cde2a64437b182b156d554dbd078b586c59249','{"lms_id": "102"}');
CREATE INDEX ix_attempts_status ON attempts (status);
CREATE INDEX ix_attempts_student_id ON attempts (student_id);
COMMIT;
