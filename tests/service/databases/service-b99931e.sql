-- A service.db as b99931e's code made it (serve, which made the shared queue tables too): made once by running make_old_database.py
-- beside this file with a git worktree of that commit on PYTHONPATH, dumped with sqlite3's iterdump.
-- Tokens: b99931e-alice-token, b99931e-bob-token (bob revoked where the code could), b99931e-instructor-token.
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
INSERT INTO "attempts" VALUES(1,'alice','autograd',1,'2026-12-04 16:02:59.361997','graded',41.5,41.5,0.0,57.0,'[]','2026-12-04 16:02:59.365375',1.25,1,'{"score": 41.5}',X'7B2263656C6C73223A205B5D2C20226D65746164617461223A207B7D2C20226E62666F726D6174223A20342C20226E62666F726D61745F6D696E6F72223A20357D');
INSERT INTO "attempts" VALUES(2,'alice','autograd',2,'2026-12-04 16:02:59.366412','queued',NULL,NULL,NULL,NULL,NULL,NULL,NULL,0,NULL,X'7B2263656C6C73223A205B315D2C20226D65746164617461223A207B7D2C20226E62666F726D6174223A20342C20226E62666F726D61745F6D696E6F72223A20357D');
CREATE TABLE claims (
	attempt_id INTEGER NOT NULL, 
	owner INTEGER NOT NULL, 
	claimed_at DATETIME NOT NULL, 
	PRIMARY KEY (attempt_id), 
	FOREIGN KEY(attempt_id) REFERENCES attempts (id)
);
CREATE TABLE grading_turns (
	assignment VARCHAR(100) NOT NULL, 
	state TEXT NOT NULL, 
	PRIMARY KEY (assignment)
);
CREATE TABLE instructors (
	id INTEGER NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (token_hash)
);
INSERT INTO "instructors" VALUES(1,'714c1145f623bc255f04cd10e839278f6fde547583dc46e810c103ade89601e4');
CREATE TABLE settings (
	name VARCHAR(50) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY (name)
);
INSERT INTO "settings" VALUES('csrf','2fd74ac5c1e52314d4a9bdd382ab4d42b67c4f1460f6b02b2b867d91dc6b088f');
CREATE TABLE students (
	student_id VARCHAR(100) NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	lms TEXT NOT NULL, 
	PRIMARY KEY (student_id), 
	UNIQUE (token_hash)
);
INSERT INTO "students" VALUES('alice','2c6f03afd194c73b3c062dae53091eb2d8082627c0242026412510a7cd574f23','{"lms_id": "101"}');
INSERT INTO "students" VALUES('bob','0dd7eb11b66d174828388e89310cb6cd8393944b41bad12580c1bf7225050668','{"lms_id": "102"}');
CREATE INDEX ix_attempts_student_id ON attempts (student_id);
CREATE INDEX ix_attempts_status ON attempts (status);
CREATE INDEX ix_claims_owner ON claims (owner);
COMMIT;
